#!/usr/bin/env bash
# Stage what the session of 2026-12-02 (second) needs on the lent H200 beside vLLM
# (../shared/gpu/stage-vllm.sh): the SmolLM2 GGUF in 4 pieces, Ray 2.60 (stage-ray.sh's two parts),
# a portable llama-cpp-python wheel (GGML_NATIVE=OFF, AVX2/FMA/F16C, no AVX-512: the device's CPU is
# not this host's) in 2 pieces plus diskcache, and the GSM8K file. One call per folder .device-m1..m4
# (each with the checkout under 64 MiB), one right after the other, from the project root there:
#   bash benchmarks/gpu_stage_extra.sh .device-mN
# The call with the SHA256SUMS (the last) joins the pieces, checks them, puts the model in /root/models
# and installs llama-cpp-python + diskcache into /tmp/site-lcpp (then: PYTHONPATH=/tmp/site-lcpp:...).
# Any other wheel in the folders (cp312: pydantic and the like, jsonschema for Ray, when vLLM's tree is
# not staged) is installed there too.
# Made here by: split -n 4 of the GGUF, split -n 2 of the wheel, sha256sum of both (see the session's notes).
set -euo pipefail
dir=${1:?a .device-mN folder}
mkdir -p /root/stage /root/ray-stage /root/models
for f in "$dir"/*; do
  case $(basename "$f") in
    ray-wheels.*|on-device-ray.sh) cp -f "$f" /root/ray-stage/ ;;
    *) cp -f "$f" /root/stage/ ;;
  esac
done
if [[ -f $dir/SHA256SUMS ]]; then
  cd /root/stage
  cat m.0 m.1 m.2 m.3 >/root/models/SmolLM2-135M-Instruct.Q4_1.gguf
  if [[ -f lw.0 ]]; then cat lw.0 lw.1 >llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl; fi
  cp -f /root/models/SmolLM2-135M-Instruct.Q4_1.gguf . && sha256sum -c SHA256SUMS
  rm -f SmolLM2-135M-Instruct.Q4_1.gguf m.? lw.?
  # without the llama-cpp-python pieces (a vLLM-only session): the model and the data only
  [[ -f llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl ]] || { ls -la /root/stage /root/models; exit 0; }
  python3 -m pip install -q --no-index --no-deps --target /tmp/site-lcpp \
    llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl diskcache-*.whl $(ls ./*.whl | grep -v -e llama_cpp -e diskcache)
  PYTHONPATH=/tmp/site-lcpp python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"
fi
ls -la /root/stage /root/ray-stage /root/models
