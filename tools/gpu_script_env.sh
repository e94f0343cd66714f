# Sourced by the one-GPU device scripts (tools/gpu_*_check.sh) after they set TOPIC: the paths
# of the unpacked CUDA bundle (tools/gpu_bundle.sh; $FR, default /tmp/fr/bin, and its lib/),
# their output folder D=$OUT/$TOPIC, the first GPU of CUDA_VISIBLE_DEVICES only, the fixtures
# where the test programs were built to find them (as tools/gpu_check.sh links them), and the
# GPU's name in $D/gpu.txt and on stdout. It runs from the repository root.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FR=${FR:-/tmp/fr/bin}
FP8RUN=${FP8RUN:-$FR/fp8run}
D=${OUT:-/tmp/out}/$TOPIC
mkdir -p "$D"
export LD_LIBRARY_PATH=/tmp/fr/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES%%,*} # one GPU
SRC=$(grep -ao '/[a-zA-Z0-9_/.-]*tests/fixtures' "$FR/test_gpu_train" 2>/dev/null | head -1 | sed 's|/tests/fixtures||')
if [ -n "$SRC" ] && [ "$SRC" != "$PWD" ] && [ ! -e "$SRC" ]; then mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 > "$D/gpu.txt"
echo "GPU: $(cat "$D/gpu.txt")"
