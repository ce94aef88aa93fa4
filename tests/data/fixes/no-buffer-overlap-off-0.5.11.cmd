python -m sglang.launch_server --model-path /root/models/Qwen3.6-27B --tp-size 2 --mamba-scheduler-strategy no_buffer --disable-overlap-schedule
