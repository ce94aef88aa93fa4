"""What this host has: OS, CPUs, memory, and the NVIDIA GPUs nvidia-smi reports.

Run as ``python -c <this file>``. Standard library only; compatible with Python 3.6.
"""

import json
import os
import platform
import shutil
import subprocess

MARKER = "KIT-RESULT "
QUERY = ["--query-gpu=index,name,memory.total,driver_version,compute_cap", "--format=csv,noheader,nounits"]


def inventory():
    info = {"hostname": platform.node(), "kernel": platform.release(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "python3": platform.python_version(), "os": "", "memory_gb": None,
            "gpus": [], "gpu_note": ""}
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if not smi:
        info["gpu_note"] = "nvidia-smi not found: no NVIDIA GPU visible on this host"
        return info
    try:
        res = subprocess.run([smi] + QUERY, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        info["gpu_note"] = "nvidia-smi failed: %s" % exc
        return info
    for line in res.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            info["gpus"].append({"index": parts[0], "name": parts[1], "memory_mib": parts[2], "driver": parts[3],
                                 "compute_cap": parts[4] if len(parts) > 4 else ""})
    if res.returncode != 0:
        info["gpu_note"] = res.stderr.strip()[-300:]
    return info


def main():
    print(MARKER + json.dumps(inventory()))


if __name__ == "__main__":
    main()
