#!/usr/bin/env bash
# CI: the pipeline through a real Slurm. Installs Slurm + munge (apt, if missing), starts a one-node
# cluster on localhost (munged, slurmctld, slurmd; 2 dummy GPUs as GRES), then
#   1. runs the CI-sized DAG with `snakemake --profile slurm --profile .ci/profile` (the users' profile;
#      .ci/profile only adds fast polling, squeue status and config/ci.yaml) and checks that reports/all
#      appears and that every job ran as a Slurm job that exited 0;
#   2. kills a training job mid-run with scancel, lets Snakemake resubmit it (the profile's retries),
#      and checks that it resumed from its checkpoint and ends with the same weights as an uninterrupted run.
# Every daemon it started is stopped by PID on exit. Needs root (Debian/Ubuntu, no systemd needed).
#
#   .ci/slurm.sh            # from .ci/run, after pytest; or by hand
# Work files go to $ELF_CI_SLURM_DIR (default: a new /tmp/elf-ci-slurm.XXXXXX), kept for inspection.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${ELF_CI_SLURM_DIR:-$(mktemp -d /tmp/elf-ci-slurm.XXXXXX)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
CONF_DIR=/etc/slurm                       # srun inside a job finds its config only here
MARK="# written by elf .ci/slurm.sh"
PIDS=()                                   # daemons started here, stopped by PID on exit
SNAKEMAKE_PID=                            # the background snakemake of the kill-and-resume check
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
T0=$SECONDS

say() { echo "== slurm CI [$((SECONDS - T0)) s]: $*"; }
fail() { echo "== slurm CI FAILED: $*" >&2; exit 1; }

install_slurm() {
    command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v sbatch > /dev/null \
        && command -v munged > /dev/null && return
    say "installing slurm and munge"
    export DEBIAN_FRONTEND=noninteractive
    local pkgs="slurmctld slurmd slurm-client munge"
    apt-get install -y -q --no-install-recommends $pkgs > "$WORK/apt.log" 2>&1 \
        || { apt-get update -q >> "$WORK/apt.log" 2>&1 \
             && apt-get install -y -q --no-install-recommends $pkgs >> "$WORK/apt.log" 2>&1; } \
        || fail "apt-get install $pkgs (see $WORK/apt.log)"
}

write_config() {
    for f in slurm.conf gres.conf; do
        if [ -e "$CONF_DIR/$f" ] && ! grep -q "^$MARK" "$CONF_DIR/$f"; then
            fail "$CONF_DIR/$f exists and was not written by this script: refusing to replace it"
        fi
    done
    mkdir -p "$CONF_DIR" "$WORK/state" "$WORK/spool" "$WORK/dev"
    for i in 0 1; do   # dummy GPU devices (like /dev/null): Slurm allocates them, nothing computes on them
        [ -e "$WORK/dev/gpu$i" ] || mknod -m 666 "$WORK/dev/gpu$i" c 1 3 || touch "$WORK/dev/gpu$i"
    done
    cat > "$CONF_DIR/slurm.conf" <<EOF
$MARK (one node on localhost; removed when the script ends)
ClusterName=elfci
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MailProg=/bin/true
ReturnToService=2
KillWait=5
GresTypes=gpu
NodeName=localhost CPUs=$CPUS RealMemory=$MEM_MB Gres=gpu:2 State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    cat > "$CONF_DIR/gres.conf" <<EOF
$MARK
NodeName=localhost Name=gpu File=$WORK/dev/gpu[0-1]
EOF
}

start_cluster() {
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
    [ -s /etc/munge/munge.key ] || setpriv --reuid=munge --regid=munge --init-groups mungekey --create
    setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --foreground \
        > "$WORK/munged.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do munge -n > /dev/null 2>&1 && break; sleep 0.2; done
    munge -n | unmunge > /dev/null || fail "munged did not start (see $WORK/munged.out)"
    slurmctld -D > "$WORK/slurmctld.out" 2>&1 &
    PIDS+=($!)
    slurmd -D -N localhost > "$WORK/slurmd.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 120); do
        [ "$(sinfo -h -n localhost -o %T 2> /dev/null)" = idle ] && return
        sleep 0.5
    done
    fail "node localhost not idle after 60 s: $(sinfo -N 2>&1) (see $WORK/slurmctld.log, $WORK/slurmd.log)"
}

stop_cluster() {
    local status=$?
    set +e
    [ -n "$SNAKEMAKE_PID" ] && kill -INT "$SNAKEMAKE_PID" 2> /dev/null && wait "$SNAKEMAKE_PID" 2> /dev/null
    if [ ${#PIDS[@]} -gt 0 ]; then
        # jobs of this private cluster still queued or running (a failed check): cancel, let them end
        squeue -h -o %i 2> /dev/null | xargs -r scancel 2> /dev/null
        for _ in $(seq 60); do [ -z "$(squeue -h -o %i 2> /dev/null)" ] && break; sleep 0.5; done
        for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[i]}" 2> /dev/null; done
        for pid in "${PIDS[@]}"; do wait "$pid" 2> /dev/null; done
    fi
    for f in slurm.conf gres.conf; do
        grep -qs "^$MARK" "$CONF_DIR/$f" && rm -f "$CONF_DIR/$f"
    done
    say "daemons stopped; work files in $WORK"
    exit $status
}

# snakemake through the users' profile + the CI additions; the node's shape goes in as ELF_SLURM_*
# (slurm/config.yaml derives every job's CPUs and memory from it). Replaces the calling (sub)shell,
# so that a background call's $! is the process to signal.
run_snakemake() {
    exec env ELF_SLURM_GPUS_PER_NODE=2 ELF_SLURM_CPUS_PER_NODE="$CPUS" ELF_SLURM_MEM_PER_NODE_MB="$MEM_MB" \
        timeout -s INT "$1" snakemake --profile slurm --profile .ci/profile \
        --slurm-logdir "$WORK/slurm-logs" "${@:2}"
}

# Every job Snakemake finished, but local rules (`all`, `localrules:`), was a Slurm job that exited 0
check_jobs_ran_in_slurm() {
    local log=$1 finished submitted id missing=0 local_rules
    local_rules=$(grep -oE "^localrule [A-Za-z0-9_]+:" "$log" | cut -d" " -f2 | tr -d : | sort -u \
        | paste -sd "|" || true)
    finished=$(grep -oE "^Finished jobid: [0-9]+ \(Rule: [A-Za-z0-9_]+\)" "$log" \
        | grep -vE "Rule: (all|${local_rules:-all})\)" | cut -d" " -f3 | sort -u || true)
    [ -n "$finished" ] || fail "no finished jobs in $log"
    for id in $finished; do
        submitted=$(grep -oE "^Job $id has been submitted with SLURM jobid [0-9]+" "$log" | tail -1 \
            | grep -oE "[0-9]+$" || true)
        if [ -z "$submitted" ]; then
            echo "job $id finished without a Slurm submission" >&2; missing=1; continue
        fi
        grep -q "_job_complete: JobId=$submitted WEXITSTATUS 0" "$WORK/slurmctld.log" \
            || { echo "Slurm job $submitted (Snakemake job $id): no exit 0 in slurmctld.log" >&2; missing=1; }
    done
    [ "$missing" = 0 ] || fail "jobs that did not run through Slurm (see $log)"
    echo "$finished" | wc -l
}

kill_and_resume_check() {
    local results=$WORK/results probe=$WORK/results/runs/resume_probe extra=$WORK/resume.yaml jobid
    # two identical runs long enough to be killed mid-way (DDP over the 2 dummy-GPU processes)
    cat > "$extra" <<EOF
runs:
  resume_probe: {paper_run: R01, budget: {steps: 120, checkpoint_every: 10}}
  resume_ref: {paper_run: R01, budget: {steps: 120, checkpoint_every: 10}}
EOF
    run_snakemake 600 --configfile config/ci.yaml "$extra" \
        --config results="$results" reports="$WORK/reports" \
        -- "$probe/ema.safetensors" "$results/runs/resume_ref/ema.safetensors" \
        > "$WORK/resume.log" 2>&1 &
    SNAKEMAKE_PID=$!
    for _ in $(seq 3000); do
        [ -s "$probe/resume/state.pt" ] && break
        kill -0 "$SNAKEMAKE_PID" 2> /dev/null || break
        sleep 0.1
    done
    [ -s "$probe/resume/state.pt" ] \
        || { wait "$SNAKEMAKE_PID"; fail "no checkpoint of resume_probe appeared (see $WORK/resume.log)"; }
    jobid=$(squeue -h -t RUNNING -o "%i %k" | awk '/resume_probe/ {print $1}')
    [ -n "$jobid" ] || fail "the running Slurm job of resume_probe not found: $(squeue -o '%i %T %k')"
    scancel "$jobid"
    # the killed attempt is gone and the retry has not reached a checkpoint yet: resume/ is stable
    while squeue -h -j "$jobid" -o %T 2> /dev/null | grep -qE "RUNNING|COMPLETING"; do sleep 0.2; done
    cp "$probe/resume/state.pt" "$WORK/killed_state.pt"
    cp "$probe/train_log.jsonl" "$WORK/killed_train_log.jsonl"
    say "scancel $jobid killed resume_probe after its checkpoint at step $(step_of "$WORK/killed_state.pt")"
    wait "$SNAKEMAKE_PID" || fail "snakemake did not recover from the scancel (see $WORK/resume.log)"
    SNAKEMAKE_PID=
    grep -q "SLURM-job '$jobid' failed, SLURM status is: 'CANCELLED'" "$WORK/resume.log" \
        || fail "Snakemake did not see Slurm job $jobid cancelled (see $WORK/resume.log)"
    python3 .ci/resume_check.py "$probe" "$results/runs/resume_ref" \
        "$WORK/killed_state.pt" "$WORK/killed_train_log.jsonl" || fail "resume check"
}

step_of() {
    python3 -c "import sys, torch; print(torch.load(sys.argv[1], weights_only=True)['step'])" "$1"
}

trap stop_cluster EXIT
trap 'exit 130' INT TERM
install_slurm
write_config
start_cluster
say "cluster up: $(sinfo -h -o '%P %D %c CPUs %m MB %G %T')"
[ "$(timeout -s INT 60 srun --gpus=1 -n1 printenv SLURM_JOB_ID)" -gt 0 ] || fail "srun smoke test"

say "CI DAG through Slurm"
(run_snakemake 1500 --config results="$WORK/results" reports="$WORK/reports" -- "$WORK/reports/all") \
    > "$WORK/dag.log" 2>&1 || { tail -40 "$WORK/dag.log"; fail "snakemake (see $WORK/dag.log)"; }
[ -s "$WORK/reports/all" ] || fail "$WORK/reports/all missing"
n=$(check_jobs_ran_in_slurm "$WORK/dag.log")
grep -q "torchrun --standalone --nproc_per_node=2 -m elf train" "$WORK"/slurm-logs/rule_train/*/*.log \
    || fail "the train job did not launch one DDP process per GPU of its allocation"
say "reports/all built by $n Slurm jobs"

say "kill a training job with scancel, resume"
kill_and_resume_check
say "passed in $((SECONDS - T0)) s"
