#!/bin/bash
set -e

source .venv-ds41-flash/bin/activate

N_NUMA=4
TT=$[ $N_NUMA * 32 ]

CUDA_DEVICE_ORDER=PCI_BUS_ID \
FLASHINFER_DISABLE_VERSION_CHECK=1 \
LK_POWER_SAVING=1 \
LK_THREAD_BINDING=CPU_CORE \
LK_THREADS=$TT \
LVLLM_ENABLE_NUMA_INTERLEAVE=1 \
LVLLM_GPU_PREFETCH_WINDOW=1 \
LVLLM_GPU_PREFILL_MIN_BATCH_SIZE=1024 \
LVLLM_GPU_RESIDENT_MOE_LAYERS="0-2" \
LVLLM_GPU_RESIDENT_MOE_LAYERS_DSPARK="" \
LVLLM_MOE_NUMA_ENABLED=1 \
OMP_NUM_THREADS=$TT \
SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1 \
SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK=0 \
SGLANG_OPT_FUSE_MHC_POST_PRE=1 \
SGLANG_WARMUP_TIMEOUT=290000 \
sglang serve \
--model /mnt/data2/models/DeepSeek-V4.1-Flash \
--served-model-name deepseek-ai/DeepSeek-V4.1-Flash \
--host 0.0.0.0 \
--port 5000 \
--trust-remote-code \
--tensor-parallel-size 1 \
--max-running-requests 1 \
--chunked-prefill-size 8192 \
--max-prefill-tokens 8192 \
--context-length 1048576 \
--max-total-tokens 1048576 \
--mem-fraction-static 0.98 \
--moe-runner-backend marlin \
--cuda-graph-backend-prefill disabled \
--disable-shared-experts-fusion \
--reasoning-parser auto \
--tool-call-parser auto \
--enable-cache-report \
--enable-metrics \
--sleep-on-idle
