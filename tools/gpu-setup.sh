#!/usr/bin/env bash
# Set up tritred on the offline H200 machine (torch + triton preinstalled, no network):
# installs the carried wheels (.whl/: pydantic & co, see ../shared/gpu/wheels.sh) and the four packages into
# /tmp/site without dependencies. Source it: `source tools/gpu-setup.sh`.
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
for p in packages/core packages/ops packages/bench packages/cli examples/tritred-rmsnorm; do
  [ -f "$p/pyproject.toml" ] && python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
    --target /tmp/site "./$p" 2>&1 | grep -v "WARNING: Target directory" || true
done
export PYTHONPATH=/tmp/site
export PATH=/tmp/site/bin:$PATH
python3 -c "import torch, triton, tritred_ops; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
set +e
