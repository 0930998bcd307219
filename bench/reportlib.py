"""What the reports of bench/run.sh, run_api.sh and run_function.sh share: percentiles
as the C drivers compute them, the machine's description, and the README
section each bench rewrites. Their report scripts import it from bench/."""
import os
import subprocess


def pct(v, p):
    """Nearest-rank percentile of sorted v, as bench_spawn and bench_api
    compute it."""
    rank = min(max(int(-(-p * len(v) // 100)), 1), len(v))
    return v[rank - 1]


def version(cmd):
    """The first line cmd prints, or "?" when it does not run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              timeout=10).stdout.splitlines()[0].strip()
    except Exception:
        return "?"


def cpu_model():
    """The CPU's model name from /proc/cpuinfo ("?" without one)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def replace_readme_section(readme, start, end, sec, tmp):
    """Put sec (text from the start marker to the end marker) in place of
    the README's section between those markers, or append it when there is
    none; written to tmp first and renamed over the README."""
    try:
        with open(readme) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    i, j = text.find(start), text.find(end)
    if i >= 0 and j > i:
        text = text[:i] + sec + text[j + len(end):]
    else:
        if text and not text.endswith("\n"):
            text += "\n"
        text += ("\n" if text else "") + sec + "\n"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, readme)
