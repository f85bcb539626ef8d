"""The sm_90 PTX of every kernel that ``packages/ops/tests/sm90_compile.py``'s calls launch; two dumps compared.

For refactors that should not change what runs (a helper shared by several kernels, a renamed argument): dump
before and after, then compare. The comparison drops what a refactor may move without changing the code
(register numbers, labels, debug lines and their files, the parameter names that carry a function's name) and
prints the kernels that differ, and whether only in order (ptxas schedules anyway). No GPU needed; run without
``TRITON_INTERPRET``.

Usage: python tools/ptx_dump.py dump DIR          (one file per launch: NN-<kernel>.ptx, in call order)
       python tools/ptx_dump.py compare DIR_A DIR_B
"""

from __future__ import annotations

import collections
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def dump(out: str) -> int:
    sys.path.insert(0, os.path.join(HERE, "..", "packages", "ops", "tests"))
    import sm90_compile as S
    import tritred_ops  # noqa: F401 (the op modules, before the patch)
    import tritred_ops._replay as R

    S._patch()
    os.makedirs(out, exist_ok=True)
    count = [0]

    def save(self, kernel, grid, *args, **kwargs):  # noqa: ANN001
        compiled = kernel.warmup(*args, grid=grid, **kwargs)
        count[0] += 1
        with open(os.path.join(out, f"{count[0]:03d}-{kernel.fn.__name__}.ptx"), "w") as f:
            f.write(compiled.asm["ptx"])
    R.Recorder.launch = save
    failed = 0
    for name, call in S.calls():
        try:
            call()
        except Exception as e:  # noqa: BLE001 (report and go on)
            failed += 1
            print(f"FAILED {name}: {e}")
    print(f"{count[0]} kernels dumped to {out}")
    return 1 if failed else 0


_DROP = re.compile(r"^\s*(\.loc|\.file|\.section|\.b8|\.b16|\.b32|\.b64|\$L|//|[{}]\s*$)")


def _normalized(path: str) -> list[str]:
    lines = []
    with open(path) as f:
        text = f.readlines()
    for line in text:
        if not line.strip() or _DROP.match(line):
            continue
        line = re.sub(r"%([a-z]+)\d+", r"%\1", line)  # register numbers
        line = re.sub(r"\$L__\w+", "$L", line)  # labels
        line = re.sub(r"_param_\d+", "_param", line)
        line = re.sub(r"\b_\w+_kernel\w*", "KERNEL", line)  # parameter names carry the function's name
        lines.append(line.strip())
    return lines


def compare(a: str, b: str) -> int:
    fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
    if fa != fb:
        print(f"different launches: {len(fa)} against {len(fb)}")
        print("  only in A:", sorted(set(fa) - set(fb))[:10], " only in B:", sorted(set(fb) - set(fa))[:10])
        return 1
    differ = 0
    for name in fa:
        la, lb = _normalized(os.path.join(a, name)), _normalized(os.path.join(b, name))
        if la != lb:
            differ += 1
            same = collections.Counter(la) == collections.Counter(lb)
            print(f"{name}: {len(la)} -> {len(lb)} lines, "
                  + ("the same instructions in another order" if same else "other instructions"))
    print(f"{len(fa)} kernels compared, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "dump" and len(sys.argv) == 3:
        sys.exit(dump(sys.argv[2]))
    if cmd == "compare" and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
