# Multi-node torchrun from the Slurm environment; sourced by train.sbatch and sft.sbatch (which set ENTRY).
#
# One srun task per node starts torchrun there; the torchrun processes meet at a c10d rendezvous on
# the job's first node (from SLURM_JOB_NODELIST, expanded by `scontrol show hostnames`). Settings:
#   nodes            SLURM_JOB_NUM_NODES (sbatch --nodes)
#   GPUs per node    GPUS_PER_NODE, else SLURM_GPUS_ON_NODE / SLURM_GPUS_PER_NODE (--gpus-per-node, --gres), else 1
#   port             MASTER_PORT (default 29500)
#   torchrun         TORCHRUN (default .venv/bin/torchrun when it exists, else torchrun on PATH)
#   NANOGRPO_DRY_RUN=1 prints the command instead of running it.
#
# Time limits and requeueing: the sbatch files ask Slurm for USR1 to this script 5 minutes before the time
# limit (--signal=B:USR1@300). On it, SIGTERM goes to every process of the job step (scancel --signal=TERM;
# torchrun also forwards it to its workers, waiting TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds, 240 here, before
# it kills them): the run finishes its step, saves a checkpoint and exits 75 (train.py's stop_signal). The
# job is then requeued (scontrol requeue; --requeue) and, once restarted (SLURM_RESTART_COUNT > 0), gets
# resume=true: it continues from that checkpoint, its Slurm log appended to (--open-mode=append). A run
# that exits 75 for another SIGTERM (a preemption, a user's scancel --signal=TERM) is requeued the same way.
set -euo pipefail

: "${ENTRY:?ENTRY (train.py or sft.py) must be set before sourcing launch.sh}"
if [[ -z "${SLURM_JOB_NODELIST:-}" ]]; then
    echo "error: SLURM_JOB_NODELIST is not set: submit with sbatch (or set the SLURM_* variables for a dry run)" >&2
    exit 2
fi
# sbatch runs a spooled copy of the script: work from the directory it was submitted from (the repo)
cd "${SLURM_SUBMIT_DIR:-.}"

NNODES="${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}"
HEAD_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
if [[ -z "$HEAD_NODE" ]]; then
    echo "error: scontrol show hostnames '$SLURM_JOB_NODELIST' gave no host name" >&2
    exit 2
fi
PORT="${MASTER_PORT:-29500}"
GPUS="${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-${SLURM_GPUS_PER_NODE:-1}}}"
GPUS="${GPUS##*:}"  # --gpus-per-node=h100:8 arrives as "h100:8"
if ! [[ "$GPUS" =~ ^[0-9]+$ ]] || (( GPUS < 1 )); then
    echo "error: cannot read the number of GPUs per node from '$GPUS' (set GPUS_PER_NODE)" >&2
    exit 2
fi
if [[ -z "${TORCHRUN:-}" ]]; then
    if [[ -x .venv/bin/torchrun ]]; then TORCHRUN=.venv/bin/torchrun; else TORCHRUN=torchrun; fi
fi

if (( ${SLURM_RESTART_COUNT:-0} > 0 )); then
    set -- "$@" resume=true  # a requeued job continues from its newest complete checkpoint
fi

CMD=(srun --nodes="$NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1
     "$TORCHRUN" --nnodes="$NNODES" --nproc_per_node="$GPUS"
     --rdzv_id="${SLURM_JOB_ID:-0}" --rdzv_backend=c10d --rdzv_endpoint="$HEAD_NODE:$PORT"
     "$ENTRY" "$@")
if [[ "${NANOGRPO_DRY_RUN:-0}" == 1 ]]; then
    printf '%q ' "${CMD[@]}" | sed 's/ $//'
    echo
    exit 0
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # torchrun's default too, without its warning
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT="${TORCH_ELASTIC_SHUTDOWN_TIMEOUT:-240}"  # time to finish the step and save

EXIT_STOPPED=75  # the run stopped on a stop signal after saving (train.py, sft.py)
STOPPING=0
stop() {
    STOPPING=1
    echo "launch.sh: the time limit is near: SIGTERM to job $SLURM_JOB_ID's processes (finish the step, save, exit)" >&2
    scancel --signal=TERM "${SLURM_JOB_ID:?}" || true
}
trap stop USR1

set +e
"${CMD[@]}" &
PID=$!
wait "$PID"
RC=$?
while kill -0 "$PID" 2>/dev/null; do  # a trapped signal ends `wait` early: wait again for srun itself
    wait "$PID"
    RC=$?
done
set -e
# under torchrun the workers' 75 arrives as torchrun's own failure (1): after our SIGTERM, that is the stop
if (( RC == EXIT_STOPPED || (STOPPING && RC != 0) )); then
    echo "launch.sh: the run stopped and saved (exit $RC): requeueing job $SLURM_JOB_ID; it resumes when it restarts" >&2
    if ! scontrol requeue "${SLURM_JOB_ID:?}"; then
        echo "launch.sh: scontrol requeue failed: submit the job again, with resume=true" >&2
        exit "$RC"
    fi
    exit 0
fi
exit "$RC"
