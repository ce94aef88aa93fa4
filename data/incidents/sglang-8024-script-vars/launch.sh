PAGE_SIZE=$(( 64 ))
ATTENTION_BACKEND="fa3"
DP_SIZE_PER_DECODE_NODE
NUM_DECODE=2
MAX_RUNNING_REQUEST_PER_GPU=32
GPUS_PER_NODE=8
DP_SIZE_PER_DECODE_NODE=8
MAX_RUNNING_REQUEST_PER_DP_RANK=$(( MAX_RUNNING_REQUEST_PER_GPU * GPUS_PER_NODE / DP_SIZE_PER_DECODE_NODE ))

SGLANG_TORCH_PROFILER_DIR=${PROFILER_DIR} \
                    PYTHONUNBUFFERED=1 \
                    SGL_ENABLE_JIT_DEEPGEMM=1 \

python3 -m sglang.launch_server \
                    --trust-remote-code \
                    --model-path /home/moyun.zty/models/deepseek-ai__DeepSeek-R1 \
                    --disaggregation-mode prefill \
                    --disaggregation-transfer-backend mooncake \
                    --disaggregation-ib-device mlx5_bond_0,mlx5_bond_1,mlx5_bond_2,mlx5_bond_3 \
                    --host 0.0.0.0 \
                    --port ${DEFAULT_PORT} \
                    --tp-size 8 \
                    --page-size ${PAGE_SIZE} \
                    --attention-backend ${ATTENTION_BACKEND} \
                    --mem-fraction-static 0.92 \
                    --chunked-prefill-size 8192 \
                    --max-running-requests $((DP_SIZE_PER_DECODE_NODE * NUM_DECODE * MAX_RUNNING_REQUEST_PER_DP_RANK)) \
                    --max-total-tokens 131076 \
                    --context-length 65535 \
                    --e
