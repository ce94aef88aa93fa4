docker run -d \
-p 11434:30000 \
--name sglang-container \
--gpus='"device=0,1"' \
-v /dataset/tools/deepseek/70B:/models \
--ipc=host \
lmsysorg/sglang:latest \
python3 -m sglang.launch_server \
--model-path /models/DeepSeek-R1-Distill-Llama-70B-Q4_K_M.gguf \
--host 0.0.0.0 \
--port 30000 \
--tp 2 \
--log-level debug \
--show-time-cost \
--log-requests \
--context-length 2048 \
--enable-metrics \
--trust-remote-code \
--disable-radix-cache \
--max_num_batched_tokens 4096
