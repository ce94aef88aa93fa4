python -m sglang.launch_server --model-path /models/Llama-3.1-8B --is-embedding --prefill-only-disable-kv-cache --disable-radix-cache --chunked-prefill-size -1
