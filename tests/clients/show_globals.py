"""Run a program as ``python PROGRAM`` would, then print some of its globals: how a test sees its data.

``python show_globals.py PROGRAM NAME...`` prints ``SHOW NAME VALUE`` per name: a tensor as its device and its
values (up to 64 of them) or their SHA-256 (more), a list element by element.
"""
import hashlib
import runpy
import sys


def show(v):
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(show(x) for x in v) + "]"
    if hasattr(v, "device") and hasattr(v, "numel"):
        host = v.detach().cpu()    # the test's own copy, after the program ran
        values = host.tolist() if host.numel() <= 64 else hashlib.sha256(host.numpy().tobytes()).hexdigest()
        return f"{v.device}:{values}"
    return repr(v)


path, names = sys.argv[1], sys.argv[2:]
sys.argv = [path]
found = runpy.run_path(path, run_name="__main__")
for name in names:
    print(f"SHOW {name} {show(found[name])}", flush=True)
