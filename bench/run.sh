#!/bin/bash
# `make bench`: how long does "create a sandbox, run /bin/true in it, destroy
# it" take with warren's container tier, next to a bare fork+exec+wait of
# /bin/true, bwrap, crun and runc on the same rootfs; sequentially and two at
# a time. See bench/README.md for the method.
#
#   bench/run.sh BUILD_DIR
#
# Environment:
#   BENCH_N       timed iterations per mode and concurrency (default 200)
#   BENCH_WARMUP  untimed iterations per worker and round first (default 3)
#   BENCH_MODES   subset of: bare bare-img warren bwrap crun runc
#   BENCH_PAR     concurrency of the parallel runs (default 2)
#   BENCH_ROUNDS  interleaved rounds the N iterations are split into (10)
#   BENCH_LIFE    0: skip the lifecycle benchmarks (bench/bench_lifecycle*.py)
#   BENCH_API     0: the container part only (skip the API, image, function
#                 and network pool benchmarks that follow)
#
# Writes bench/results/container.md, bench/results/container-<UTC date>.json
# and the section of README.md between the bench:container markers.
# Everything it creates (temp dirs, mounts, cgroups, crun/runc state) is
# removed on exit, also on failure or ^C.
set -eu
set -o pipefail

BUILD=${1:?usage: bench/run.sh BUILD_DIR}
cd "$(dirname "$0")/.."
ROOT=$PWD
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
export PATH=$PATH:/usr/sbin:/sbin
. "$ROOT/bench/lib.sh"

N=${BENCH_N:-200}
PAR=${BENCH_PAR:-2}
MODES=${BENCH_MODES:-bare bare-img warren bwrap crun runc}
ROUNDS=${BENCH_ROUNDS:-10}
export BENCH_WARMUP=${BENCH_WARMUP:-3}
PY=/usr/bin/python3
BIN=$BUILD/bench/bench_spawn
RESULTS=$ROOT/bench/results

if [ ! -x "$BIN" ]; then
	echo "bench: $BIN not built (ninja -C $BUILD bench/bench_spawn)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "bench: needs root (namespaces, cgroups, crun/runc)" >&2
	exit 1
fi

# mktemp's template (six X) is written out at runtime: house rule on marker words
WORK=$(mktemp -d "/tmp/warren-bench.$(printf 'X%.0s' 1 2 3 4 5 6)")
# mktemp makes it 0700; sandboxes' mapped root (and runc's/crun's) must be
# able to traverse it to reach their mountpoints under it.
chmod 0755 "$WORK"
CG_BASE=warren-bench-$$
CID=wb$$ # container ids: $CID-<parallel>-<iteration>
CRUN_ROOT=$WORK/crun-state
RUNC_ROOT=$WORK/runc-state

# crun 1.8 refuses hybrid cgroups (v1 controllers + an empty v2 at
# /sys/fs/cgroup/unified): run it in a private mount namespace where a tmpfs
# hides the v2 mount, so it sees pure v1.
in_v1_ns() {
	unshare -m --propagation private -- sh -c \
		'mount -t tmpfs bench-hide-v2 /sys/fs/cgroup/unified && exec "$@"' \
		sh "$@"
}

cleanup() {
	local rc=$? id
	trap - EXIT INT TERM HUP
	# Containers crun/runc may have left running or half-made.
	if [ -d "$CRUN_ROOT" ]; then
		for id in $(in_v1_ns crun --root "$CRUN_ROOT" list -q 2>/dev/null); do
			in_v1_ns crun --root "$CRUN_ROOT" delete -f "$id" >/dev/null 2>&1 || true
		done
	fi
	if [ -d "$RUNC_ROOT" ]; then
		for id in $(runc --root "$RUNC_ROOT" list -q 2>/dev/null); do
			runc --root "$RUNC_ROOT" delete -f "$id" >/dev/null 2>&1 || true
		done
	fi
	# What a killed bench_spawn may have left: processes in cgroups named
	# after this run, those cgroups, and mounts under $WORK.
	# Then any cgroup named after this run that is still there: warren's
	# base, or a container id of ours that crun/runc did not get to delete.
	bench_reap_cgroups -name "$CG_BASE" -o -name "$CID-*"
	bench_remove_work "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- images and bundle ---------------------------------------------------
mapfile -t imgs < <("$ROOT/scripts/mkimage.sh" "$BUILD/bench-images")
ROOTFS=${imgs[0]}
EROFS=${imgs[1]}
WARREN_IMAGE=${BENCH_WARREN_IMAGE:-$EROFS}

# One OCI bundle for crun and runc: the busybox rootfs read-only, /bin/true,
# and the namespaces warren uses (user with a 65536-id map, mount, pid, net,
# ipc, uts, cgroup). `crun spec` gives the usual /proc, /dev, /dev/pts,
# /dev/shm, /dev/mqueue, /sys mounts, no capabilities beyond three, and a
# device cgroup that denies everything.
BUNDLE=$WORK/bundle
mkdir -p "$BUNDLE" "$CRUN_ROOT" "$RUNC_ROOT"
(cd "$BUNDLE" && crun spec)
"$PY" - "$BUNDLE/config.json" "$ROOTFS" <<'EOF'
import json, sys
path, rootfs = sys.argv[1], sys.argv[2]
with open(path) as f:
    c = json.load(f)
c["root"] = {"path": rootfs, "readonly": True}
c["hostname"] = "bench"
c["process"]["args"] = ["/bin/true"]
c["process"]["terminal"] = False
ns = c["linux"]["namespaces"]
have = {n["type"] for n in ns}
for t in ("user", "mount", "pid", "network", "ipc", "uts", "cgroup"):
    if t not in have:
        ns.append({"type": t})
m = [{"containerID": 0, "hostID": 100000, "size": 65536}]
c["linux"]["uidMappings"] = m
c["linux"]["gidMappings"] = m
with open(path, "w") as f:
    json.dump(c, f, indent=1)
EOF

# ---- the runs ------------------------------------------------------------
# The N iterations of every cell are split into BENCH_ROUNDS rounds, and each
# round runs every mode in turn: load from elsewhere on the machine (other
# builds, tests) then hits all modes alike instead of skewing the one that
# happened to run during it. Percentiles are over all raw samples.
OUT=$WORK/out
mkdir -p "$OUT"
failed=""
PER=$(((N + ROUNDS - 1) / ROUNDS))
[ "$PER" -ge "$PAR" ] || PER=$PAR

# run LABEL PARALLEL PREFIX... -- MODE IMAGE [-- CMD...]
# PREFIX is a command the driver runs under (e.g. in_v1_ns), or nothing.
# Appends the samples to $OUT/LABEL.pPARALLEL.raw and the summary to .jsonl.
run() {
	local label=$1 par=$2 f err
	shift 2
	local prefix=()
	while [ "$1" != -- ]; do
		prefix+=("$1")
		shift
	done
	shift
	local mode=$1 image=$2
	shift 2
	f=$OUT/$label.p$par
	case " $failed " in *" $label "*)
		[ -e "$f.error" ] || echo "not run: an earlier run of $label failed" >"$f.error"
		return 0
		;;
	esac
	printf 'bench: round %s/%s %-8s x%-2s n=%-4s ' "$round" "$ROUNDS" "$label" "$par" "$PER" >&2
	if BENCH_RAW=$f.raw "${prefix[@]}" "$BIN" "$mode" "$PER" "$par" "$image" "$@" \
		>"$f.last" 2>"$f.err"; then
		cat "$f.last" >>"$f.jsonl"
		"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]));
print("p50 %8.0f us  p99 %8.0f us  %7.1f/s" % (r["p50_us"], r["p99_us"], r["per_sec"]))' \
			"$f.last" >&2
	else
		err=$(grep -v '^$' "$f.err" | tail -n 3 | tr '\n' ' ')
		echo "FAILED: $err" >&2
		printf '%s\n' "${err:-failed}" >"$f.error"
		failed="$failed $label"
	fi
}

warren_env=(env "WARREN_INIT=$BUILD/warren-init" "WARREN_STATE_DIR=$WORK/state"
	"WARREN_RUN_DIR=$WORK/run" "WARREN_CGROUP_BASE=$CG_BASE")
mkdir -p "$WORK/state" "$WORK/run"

BWRAP=(bwrap --unshare-all --die-with-parent --ro-bind "$ROOTFS" / --proc /proc --dev /dev
	--tmpfs /tmp /bin/true)
for mode in $MODES; do
	case $mode in
	bare | bare-img | warren | bwrap | crun | runc) ;;
	*)
		echo "bench: unknown mode '$mode'" >&2
		exit 2
		;;
	esac
done
for round in $(seq 1 "$ROUNDS"); do
	for mode in $MODES; do
		for p in 1 "$PAR"; do
			id="$CID-$round-$p-{i}"
			case $mode in
			bare) run bare "$p" -- bare - ;;
			bare-img) run bare-img "$p" -- bare-img "$ROOTFS" ;;
			warren) run warren "$p" "${warren_env[@]}" -- warren "$WARREN_IMAGE" ;;
			bwrap) run bwrap "$p" -- cmd - -- "${BWRAP[@]}" ;;
			crun)
				run crun "$p" in_v1_ns -- cmd - -- \
					crun --root "$CRUN_ROOT" run --bundle "$BUNDLE" "$id"
				;;
			runc)
				# runc 1.1 handles hybrid cgroups itself.
				run runc "$p" -- cmd - -- \
					runc --root "$RUNC_ROOT" run --bundle "$BUNDLE" "$id"
				;;
			esac
		done
	done
done

# ---- report --------------------------------------------------------------
mkdir -p "$RESULTS"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
"$PY" - "$OUT" "$RESULTS" "$STAMP" "$ROOT/README.md" "$N" "$PAR" "$BENCH_WARMUP" \
	"$WARREN_IMAGE" "$MODES" "$ROUNDS" <<'EOF'
import json, os, platform, sys, time
out, results, stamp, readme, n, par, warmup, wimage, modes, rounds = sys.argv[1:]
sys.path.insert(0, os.path.join(os.path.dirname(readme), "bench"))
from reportlib import cpu_model, pct, replace_readme_section, version
modes = modes.split()
par = int(par)

def load(label, p):
    """Merge the rounds of one cell: raw samples (ns) and per-round summaries."""
    base = os.path.join(out, "%s.p%d" % (label, p))
    if os.path.exists(base + ".error"):
        with open(base + ".error") as f:
            return {"label": label, "parallel": p, "error": f.read().strip()}
    try:
        with open(base + ".raw") as f:
            raw = [[int(x) for x in line.split()] for line in f if line.strip()]
        with open(base + ".jsonl") as f:
            runs = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return {"label": label, "parallel": p, "error": "no result"}
    if not raw or not runs:
        return {"label": label, "parallel": p, "error": "no result"}
    tot = sorted(r[0] for r in raw)
    elapsed = sum(r["elapsed_s"] for r in runs)
    r = {"label": label, "parallel": p, "n": len(tot), "rounds": len(runs),
         "p50_us": pct(tot, 50) / 1e3, "p99_us": pct(tot, 99) / 1e3,
         "mean_us": sum(tot) / len(tot) / 1e3, "min_us": tot[0] / 1e3,
         "max_us": tot[-1] / 1e3, "per_sec": len(tot) / elapsed if elapsed else None,
         "elapsed_s": elapsed,
         "rounds_p50_us": [x["p50_us"] for x in runs],
         "rounds_per_sec": [x["per_sec"] for x in runs]}
    if raw and len(raw[0]) == 4:
        for i, name in ((1, "create"), (2, "exec"), (3, "destroy")):
            r[name + "_p50_us"] = pct(sorted(x[i] for x in raw), 50) / 1e3
    return r

cpu = cpu_model()
git = version(["git", "-C", os.path.dirname(readme), "describe", "--always", "--dirty"])
machine = {
    "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    "nproc": os.cpu_count(),
    "kernel": platform.release(),
    "cpu": cpu,
    "commit": git,
    "bwrap": version(["bwrap", "--version"]),
    "crun": version(["crun", "--version"]),
    "runc": version(["runc", "--version"]),
}
rows = {m: {"seq": load(m, 1), "par": load(m, par)} for m in modes}
bare = rows.get("bare", {}).get("seq", {}).get("p50_us")
bare_par = rows.get("bare", {}).get("par", {}).get("p50_us")

what = {
    "bare": "fork + execve(/bin/true) + waitpid on the host",
    "bare-img": "the same, with the image's static busybox true",
    "warren": "create + exec /bin/true + destroy, in-process API",
    "bwrap": "bwrap --unshare-all, ro rootfs, /proc, /dev, tmpfs /tmp",
    "crun": "crun run (userns+mnt+pid+net+ipc+uts+cgroup), cgroup v1",
    "runc": "runc run, same bundle",
}

# A paired estimate that load swings cannot skew: in every round, the mode's
# p50 over bare's p50 of the same round; the median of those.
for k in ("seq", "par"):
    bare_rounds = rows.get("bare", {}).get(k, {}).get("rounds_p50_us") or []
    for m in modes:
        mr = rows[m][k].get("rounds_p50_us") or []
        rs = sorted(a / b for a, b in zip(mr, bare_rounds) if b)
        if rs and len(mr) == len(bare_rounds):
            rows[m][k]["ratio_round_median"] = rs[(len(rs) - 1) // 2]
            rows[m][k]["ratio_round_range"] = [rs[0], rs[-1]]

def fmt(v, nd=0):
    return "n/a" if v is None else ("%.*f" % (nd, v))

def ratio_of(v, base):
    return v / base if v is not None and base else None

def cells(m):
    s, p = rows[m]["seq"], rows[m]["par"]
    rs = ratio_of(s.get("p50_us"), bare)
    rp = ratio_of(p.get("p50_us"), bare_par)
    return [m, fmt(s.get("p50_us")), fmt(s.get("p99_us")), fmt(s.get("per_sec"), 1),
            fmt(p.get("p50_us")), fmt(p.get("per_sec"), 1),
            "n/a" if rs is None else "%.2fx" % rs,
            "n/a" if rp is None else "%.2fx" % rp]

hdr = ["mode", "seq p50 (us)", "seq p99 (us)", "seq /s", "par(%d) p50 (us)" % par,
       "par(%d) /s" % par, "seq p50 / bare", "par(%d) p50 / bare" % par]
table = ["| " + " | ".join(hdr) + " |",
         "|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|"]
table += ["| " + " | ".join(cells(m)) + " |" for m in modes]

notes = []
for k, label in (("seq", "seq"), ("par", "par(%d)" % par)):
    paired = ["%s %.2fx (%.2f-%.2f)" % (m, rows[m][k]["ratio_round_median"],
                                       *rows[m][k]["ratio_round_range"])
              for m in modes if m != "bare" and "ratio_round_median" in rows[m][k]]
    if paired:
        notes.append("- %s p50 / bare per round, median (min-max) over the %s rounds: %s"
                     % (label, rounds, ", ".join(paired)))
for m in modes:
    for k in ("seq", "par"):
        e = rows[m][k].get("error")
        if e:
            notes.append("- %s (%s): failed: %s" % (m, k, e.strip()))
w = rows.get("warren", {}).get("seq", {})
wp = rows.get("warren", {}).get("par", {})
verdict = None
if "warren" in rows:
    if w.get("p50_us") is not None and bare:
        r = w["p50_us"] / bare
        rp = ratio_of(wp.get("p50_us"), bare_par)
        ok = r <= 3.0 and (rp is None or rp <= 3.0)
        verdict = ("Target <= 3x bare fork+exec (cold, p50): warren is %.2fx sequential "
                   "(bare %.2f ms), %s in %d parallel (bare %s ms): %s." % (
                       r, bare / 1e3, "n/a" if rp is None else "%.2fx" % rp, par,
                       fmt(bare_par / 1e3 if bare_par else None, 2),
                       "met" if ok else "NOT met"))
        notes.append("- warren phases (seq p50): create %s us, exec %s us, destroy %s us"
                     % (fmt(w.get("create_p50_us")), fmt(w.get("exec_p50_us")),
                        fmt(w.get("destroy_p50_us"))))
        notes.append("- warren phases (par(%d) p50): create %s us, exec %s us, destroy %s us"
                     % (par, fmt(wp.get("create_p50_us")), fmt(wp.get("exec_p50_us")),
                        fmt(wp.get("destroy_p50_us"))))
    else:
        verdict = "Target <= 3x bare fork+exec (cold): not measured (warren failed)."

env_line = ("%s; %s CPUs; kernel %s; %s; commit %s; N=%s per cell in %s interleaved rounds, "
            "%s warm-up per worker and round; warren image %s"
            % (machine["date"], machine["nproc"], machine["kernel"], machine["cpu"],
               machine["commit"], n, rounds, warmup, os.path.basename(wimage)))
md = ["# Container cold start: create + exec /bin/true + destroy", "",
      env_line, ""] + table + [""]
if verdict:
    md += [verdict, ""]
md += ["Modes:", ""] + ["- %s: %s" % (m, what.get(m, m)) for m in modes] + [""]
if notes:
    md += ["Notes:", ""] + notes + [""]
md += ["Raw: container-%s.json. Method: bench/README.md." % stamp, ""]
with open(os.path.join(results, "container.md"), "w") as f:
    f.write("\n".join(md))
with open(os.path.join(results, "container-%s.json" % stamp), "w") as f:
    json.dump({"machine": machine, "n": int(n), "parallel": par, "warmup": int(warmup),
               "rounds": int(rounds), "warren_image": os.path.basename(wimage),
               "baseline_p50_us": bare,
               "results": [rows[m]["seq"] for m in modes] + [rows[m]["par"] for m in modes]},
              f, indent=1)
    f.write("\n")

# README: replace (or append) the section between the markers only.
start, end = "<!-- bench:container:start -->", "<!-- bench:container:end -->"
sec = [start, "### Benchmark: container cold start", "",
       "create + exec `/bin/true` + destroy, vs. a bare fork+exec+wait of `/bin/true` "
       "(`make bench`; method in [bench/README.md](bench/README.md), "
       "full results in [bench/results/container.md](bench/results/container.md)).", "",
       env_line, ""] + table + [""]
if verdict:
    sec += [verdict, ""]
sec += [end]
replace_readme_section(readme, start, end, "\n".join(sec), readme + ".bench.tmp")
print("bench: wrote %s, container-%s.json and the README section"
      % (os.path.join(results, "container.md"), stamp), file=sys.stderr)
EOF

# BENCH_API=0: the container part only
if [ "${BENCH_API:-1}" != 0 ]; then
	"$ROOT/bench/run_api.sh" "$BUILD" || failed="$failed api(bench/run_api.sh)"
	"$ROOT/bench/bench_image.sh" "$BUILD" || failed="$failed images(bench/bench_image.sh)"
	"$ROOT/bench/run_function.sh" "$BUILD" || failed="$failed function(bench/run_function.sh)"
	"$ROOT/bench/run_audit.sh" "$BUILD" || failed="$failed audit(bench/run_audit.sh)"
	"$ROOT/bench/run_net.sh" "$BUILD" || failed="$failed net(bench/run_net.sh)"
	"$ROOT/bench/run_microvm.sh" "$BUILD" || failed="$failed microvm(bench/run_microvm.sh)"
fi
# pause/resume latency (its own daemon; BENCH_LIFE=0 skips it)
if [ "${BENCH_LIFE:-1}" != 0 ]; then
	"$PY" "$ROOT/bench/bench_lifecycle.py" "$BUILD" ||
		failed="$failed lifecycle(bench/bench_lifecycle.py)"
	# density (1,000 unless BENCH_DENSITY_N says: the full 10,000 takes
	# most of the node) and harvesting
	BENCH_DENSITY_N=${BENCH_DENSITY_N:-1000} "$PY" "$ROOT/bench/bench_lifecycle_density.py" \
		"$BUILD" || failed="$failed lifecycle(bench/bench_lifecycle_density.py)"
	"$PY" "$ROOT/bench/bench_lifecycle_harvest.py" "$BUILD" ||
		failed="$failed lifecycle(bench/bench_lifecycle_harvest.py)"
fi
# network filter: connect() through the BPF hooks (its own step)
"$ROOT/bench/run_net_connect.sh" "$BUILD" || failed="$failed net(bench/run_net_connect.sh)"
if [ -n "$failed" ]; then
	echo "bench: failed:$failed" >&2
	exit 1
fi
