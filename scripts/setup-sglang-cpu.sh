#!/usr/bin/env bash
# Build a virtual environment with a REAL SGLang server that runs on this CPU (tests only).
#
#   scripts/setup-sglang-cpu.sh [VENV_DIR]          (default: .venv-sglang at the repo root)
#
# What it installs (the recipe, step by step):
#   - torch 2.13.0: `pip install torch==2.13.0` takes the CPU build that lies on this kind of
#     machine's disk (Python 3.11); a constraints file keeps every later install on it;
#   - sglang 0.5.23, torchvision 0.28.0, xgrammar, compressed-tensors with --no-deps: the
#     sglang wheel pins torch 2.14.1 and CUDA-only packages, none of which a CPU run imports;
#   - the runtime packages the server imports on the CPU path, pinned to versions seen to work;
#   - scripts/sgl_kernel_shim: an `sgl_kernel` stand-in for IMPORT-TIME NAMES ONLY (every
#     function raises NotImplementedError; none is called for a dense Llama, and without the
#     real library's torch ops SGLang stays off its AMX path). See scripts/sgl_kernel_shim/README.md;
#   - the torchvision guard (below, step 5), because SGLang imports torchvision at start-up and
#     PyPI's torchvision is a CUDA build that cannot register its ops beside CPU torch.
#
# Then: SGLANG_USE_CPU_ENGINE=1 VENV_DIR/bin/python -m sglang.launch_server --device cpu \
#   --sleep-on-idle ... (see tests/data/sglang-cpu/README.md for the argv that was captured).
#
# Idempotent: when VENV_DIR already imports sglang.launch_server with the CPU engine it says
# so and exits 0 at once; a half-built VENV_DIR is completed. Keep it apart from the app's venv.
set -euo pipefail

TORCH_VERSION=2.13.0
SGLANG_VERSION=0.5.23
TORCHVISION_VERSION=0.28.0

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV_DIR=${1:-$REPO_ROOT/.venv-sglang}
PYTHON=${PYTHON:-python3}
START=$SECONDS

say() { printf '[setup-sglang-cpu] %s\n' "$*"; }
die() { printf '[setup-sglang-cpu] ERROR: %s\n' "$*" >&2; exit 1; }

# The tiny random Llama that scenarios/tiny-cpu.toml serves (--load-format dummy: config and
# tokenizer only, no weights), beside the environment.
tiny_model() {
    if [ ! -f "$VENV_DIR/tiny-llama/config.json" ]; then
        "$PYTHON" "$REPO_ROOT/scripts/make_tiny_model.py" "$VENV_DIR/tiny-llama" >/dev/null \
            || die "could not write the tiny model into $VENV_DIR/tiny-llama"
    fi
    say "tiny model: $VENV_DIR/tiny-llama"
}

# What "ready" means: the launcher, SGLang's config package (it imports torchvision), the
# shim and the CPU torch all import with the CPU engine selected.
READY_CHECK='
import torch, sglang.launch_server, sglang.srt.configs, sgl_kernel
assert torch.__version__.split("+")[0] == "'$TORCH_VERSION'", torch.__version__
assert getattr(sgl_kernel, "IS_SHIM", False), "sgl_kernel is not the project shim"
'
is_ready() {
    [ -x "$VENV_DIR/bin/python" ] &&
        SGLANG_USE_CPU_ENGINE=1 "$VENV_DIR/bin/python" -c "$READY_CHECK" >/dev/null 2>&1
}

if is_ready; then
    say "ready: $VENV_DIR already runs SGLang $SGLANG_VERSION on the CPU (checked in $((SECONDS - START)) s); nothing to do"
    tiny_model
    exit 0
fi

# --- 0. preconditions --------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "$PYTHON not found (set PYTHON=/path/to/python3.11)"
PYVER=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$PYVER" != "3.11" ]; then
    say "WARNING: $PYTHON is Python $PYVER; the CPU torch $TORCH_VERSION file on this kind of machine is for 3.11, so pip may download a CUDA build of several GB"
fi

# --- 1. venv -----------------------------------------------------------------------------------
if [ -d "$VENV_DIR" ] && [ ! -x "$VENV_DIR/bin/python" ]; then
    die "$VENV_DIR exists but has no bin/python; remove it and run again"
fi
if [ ! -d "$VENV_DIR" ]; then
    say "1/6 creating venv $VENV_DIR with $PYTHON (Python $PYVER)"
    "$PYTHON" -m venv "$VENV_DIR"
else
    say "1/6 completing the existing venv $VENV_DIR"
fi
VPY="$VENV_DIR/bin/python"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Every install goes through these constraints, so nothing can swap torch for another build.
# The rest pins the packages (and their dependencies) to the versions this recipe was run with.
CONSTRAINTS="$WORK/constraints.txt"
cat >"$CONSTRAINTS" <<EOF
torch==$TORCH_VERSION
torchvision==$TORCHVISION_VERSION
sglang==$SGLANG_VERSION
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiosignal==1.4.0
annotated-doc==0.0.7
annotated-types==0.8.0
anyio==4.16.0
apache-tvm-ffi==0.1.11
asttokens==3.0.2
attrs==26.1.0
blobfile==3.0.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
compressed-tensors==0.18.0
dill==0.4.1
distro==1.9.0
easydict==1.14
einops==0.8.2
executing==2.3.0
fastapi==0.165.0
filelock==4.3.1
frozenlist==1.8.0
fsspec==2026.9.0
gguf==0.19.0
h11==0.16.0
hf-xet==1.8.0
httpcore==1.0.9
httpx==0.28.1
huggingface-hub==1.33.0
idna==3.20
interegular==0.3.3
ipython==9.18.1
ipython-pygments-lexers==1.1.1
jedi==0.20.1
jinja2==3.1.6
jiter==0.19.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
llguidance==1.9.1
loguru==0.7.3
lxml==6.1.3
markdown-it-py==4.3.0
markupsafe==3.0.4
matplotlib-inline==0.2.2
mdurl==0.1.2
mpmath==1.3.0
msgspec==0.23.0
multidict==7.2.1
networkx==3.6.1
numpy==2.4.6
openai==2.8.0
opentelemetry-api==1.45.2
orjson==3.13.0
packaging==26.4
parso==0.8.7
partial-json-parser==0.2.1.1.post7
pexpect==4.9.0
pillow==13.0.0
prometheus-client==0.26.0
prompt-toolkit==3.0.53
propcache==0.5.4
psutil==7.2.2
ptyprocess==0.7.0
pure-eval==0.2.4
pybase64==1.5.1
pycparser==3.12
pycryptodomex==3.24.2
pydantic==2.14.4
pydantic-core==2.50.5
pygments==2.21.0
python-dateutil==2.9.0.post0
python-multipart==0.0.34
pyyaml==6.0.4
pyzmq==27.3.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rich==15.0.0
rpds-py==2026.9.1
safetensors==0.8.0
sentencepiece==0.2.1
setproctitle==1.3.8
shellingham==1.5.4
six==1.17.0
sniffio==1.3.1
soundfile==0.14.0
stack-data==0.6.3
starlette==1.10.0
sympy==1.14.0
tiktoken==0.14.0
tokenizers==0.23.2
tqdm==4.70.1
traitlets==5.16.1
transformers==5.19.0
triton==3.9.0
typer==0.29.2
typing-extensions==4.16.0
typing-inspection==0.4.5
urllib3==2.8.0
uvicorn==0.54.0
uvloop==0.23.0
watchfiles==1.3.0
wcwidth==0.9.4
xgrammar==0.2.7
xxhash==4.1.0
yarl==1.25.1
zstandard==0.25.0
EOF

# pip, quieter: this machine's pip.conf names two file:// indexes that do not exist for most
# packages, and pip warns once per package; those lines (only) are dropped.
pip_install() {
    "$VPY" -m pip install --disable-pip-version-check -q -c "$CONSTRAINTS" "$@" \
        2> >(grep -v -e "is ignored: it is neither a file nor a directory" >&2)
}

# --- 2. torch (CPU build from local disk) ------------------------------------------------------
say "2/6 torch==$TORCH_VERSION (the CPU build on this machine's disk)"
t=$SECONDS
pip_install "torch==$TORCH_VERSION"
TORCH_BUILD=$("$VPY" -W ignore -c 'import torch; print(torch.__version__)')
case "$TORCH_BUILD" in
    *+cpu) say "    torch $TORCH_BUILD ($((SECONDS - t)) s)" ;;
    *) say "WARNING: torch $TORCH_BUILD is not the +cpu build (no local file?): it works on the CPU but weighs several GB" ;;
esac

# --- 3. what the server imports on the CPU path ------------------------------------------------
# triton (1 GB) is imported unconditionally by sglang.srt.utils.common; IPython by sglang.utils;
# gguf and soundfile by model/quantization modules loaded at start-up. scipy, numba, ninja,
# nvidia-ml-py and the other CUDA-side requirements of the sglang wheel are not needed here.
say "3/6 runtime packages (pinned; torch stays $TORCH_BUILD)"
t=$SECONDS
pip_install \
    aiohttp fastapi uvicorn uvloop orjson pyzmq psutil prometheus-client pydantic requests \
    numpy packaging setproctitle msgspec pybase64 python-multipart partial-json-parser \
    interegular einops tqdm regex transformers tokenizers xxhash zstandard pillow distro \
    easydict blobfile openai sentencepiece tiktoken watchfiles python-dateutil pyyaml dill \
    llguidance apache-tvm-ffi loguru jsonschema IPython gguf soundfile triton
say "    done ($((SECONDS - t)) s)"

# --- 4. sglang & co. without their dependencies; the sgl_kernel shim ---------------------------
say "4/6 sglang==$SGLANG_VERSION, torchvision, xgrammar, compressed-tensors (--no-deps) and the sgl_kernel shim"
say "    (pip may list sglang's CUDA-only requirements as missing below: expected, they are left out on purpose)"
t=$SECONDS
pip_install --no-deps "sglang==$SGLANG_VERSION" "torchvision==$TORCHVISION_VERSION" \
    xgrammar compressed-tensors
# Build the shim from a copy, so no build/ or *.egg-info lands in the repository.
cp -r "$REPO_ROOT/scripts/sgl_kernel_shim" "$WORK/sgl_kernel_shim"
pip_install --no-deps "$WORK/sgl_kernel_shim"
say "    done ($((SECONDS - t)) s)"

# --- 5. torchvision guard ----------------------------------------------------------------------
# Checked first: without torchvision the server does NOT start, because
# sglang/srt/configs/__init__.py -> nano_nemotron_vl -> multimodal/internvl_utils imports
# torchvision.transforms unconditionally (ModuleNotFoundError at argument resolution).
# PyPI's torchvision 0.28.0 is a CUDA build: its C ops cannot load beside CPU torch, and two
# decorators in torchvision/_meta_registrations.py, @torch.library.register_fake("torchvision::nms")
# and ("torchvision::qnms"), then fail with "operator torchvision::nms does not exist".
# The guard rewrites exactly those two decorator lines so that they register only when
# torchvision.extension._has_ops() is true, and tags them "engram-top CPU guard". Nothing
# in SGLang's CPU path calls nms.
say "5/6 torchvision guard (skip the nms/qnms fake-op registrations when torchvision's C ops are absent)"
"$VPY" - <<'PYEOF'
import importlib.util
import pathlib
import sys

MARK = "engram-top CPU guard"
spec = importlib.util.find_spec("torchvision")  # finds the package without importing it
path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "_meta_registrations.py"
src = path.read_text()
if MARK in src:
    print(f"    already applied: {path}")
    sys.exit(0)
for op in ("nms", "qnms"):
    old = f'@torch.library.register_fake("torchvision::{op}")\n'
    new = (f'@(torch.library.register_fake("torchvision::{op}") '
           f'if torchvision.extension._has_ops() else (lambda fn: fn))  # {MARK}\n')
    if src.count(old) != 1:
        sys.exit(f"cannot apply the torchvision guard: expected one line {old.strip()!r} in {path}")
    src = src.replace(old, new)
path.write_text(src)
print(f"    applied to the nms and qnms decorators in {path}")
PYEOF

# --- 6. check ----------------------------------------------------------------------------------
say "6/6 checking: SGLANG_USE_CPU_ENGINE=1 python -c 'import sglang.launch_server, sglang.srt.configs, sgl_kernel'"
if ! SGLANG_USE_CPU_ENGINE=1 "$VPY" -c "$READY_CHECK"; then
    die "the venv was built but SGLang does not import (see the traceback above)"
fi
tiny_model
SIZE=$(du -sh "$VENV_DIR" | cut -f1)
say "ready: $VENV_DIR (SGLang $SGLANG_VERSION, torch $TORCH_BUILD, $SIZE) in $((SECONDS - START)) s"
say "launch: SGLANG_USE_CPU_ENGINE=1 $VENV_DIR/bin/python -m sglang.launch_server --model-path DIR --load-format dummy --device cpu --host 127.0.0.1 --port PORT --enable-metrics --mem-fraction-static 0.1 --max-total-tokens 8192 --sleep-on-idle"
