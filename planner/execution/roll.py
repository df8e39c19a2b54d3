"""The restart roll: a restart plan carried out, one broker at a time, locked and resumable (docs/APPLY.md
"Restart rolls").

Phases, each state persisted in the roll record `/kplan/rolls/<plan hex>` (one fenced transaction per state
change, the same transaction that makes the write the state names, as the executor does for its units):
  protect  the plan's temporary replicas, through the executor (its batches, throttles and run record, under
           this roll's lock)
  steps    per broker, in the plan's order:
             pending -> the broker is registered and nothing it hosts would be offline or under min ISR without
                        it (else stop, nothing touched) -> demoting: its leadership moves off (the replay's
                        demote rule on the live state: reordered lists, one reassignment) -> electing: a
                        preferred election for what it led -> restarting: maintenance state `restarting`, the
                        restart command (if configured) runs, the roll waits for the broker's registration to
                        be replaced (a new ZooKeeper session: it left and registered again) -> back: gates (every
                        ISR it was in holds it again; nothing offline or under min ISR that was not before the
                        roll) -> restoring: its lists written back -> restore-electing: a preferred election
                        for the partitions it is the preferred leader of -> done: leadership restored, the
                        maintenance state cleared. With `pause`, the roll stops after a step (state paused); run
                        it again to continue.
  undo     the original lists back (rollback.json: only removals, no data copied), through the executor
  leaders  a preferred election wherever the leader is not the first replica, on the partitions of the roll
Stopping at a failed gate leaves the cluster as safe as it was before that gate (temporary replicas in place,
the broker's leadership where the last completed state left it) and says what to do; running the roll again
resumes where it stopped.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from planner import codec
from planner import zk as zkmod
from planner.errors import BadInput, NoThrottle, PlannerError, SafetyRefusal, WrongPlanKind
from planner.execution import kraftsteps
from planner.execution.progress import write_json_atomic
from planner.execution.roller import Roll
from planner.execution.rollrecord import RECORDS, RollOptions, RollResult, status
from planner.requests import RollRequest
from planner.runfolder import check_records, records_folder

__all__ = ["Roll", "RollOptions", "RollResult", "command_restarter", "registrations", "roll_folder", "roll_step",
           "status"]

log = logging.getLogger(__name__)


def command_restarter(template: str, timeout: float, brokers: dict[int, dict[str, Any]] | None = None
                      ) -> Callable[[int], None]:
    """A restart that runs an operator's command, e.g. `ssh kafka-{broker} sudo systemctl restart kafka`:
    `{broker}` (and `{host}`, `{port}` from the broker's registration) are filled in. The command must return
    once the restart is under way; the roll then waits for the broker to register again. A non-zero exit
    stops the roll (the broker's leadership is already moved off, so it is safe to restart it by hand)."""
    import shlex

    def restart(broker: int) -> None:
        info = (brokers or {}).get(broker, {})
        cmd = template.format(broker=broker, host=info.get("host", ""), port=info.get("port", ""))
        log.info("restart command for broker %d: %s", broker, cmd)
        try:
            done = subprocess.run(shlex.split(cmd), capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SafetyRefusal(f"the restart command for broker {broker} failed: {e}; restart it by hand and run "
                                "the roll again") from None
        if done.returncode:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise SafetyRefusal(f"the restart command for broker {broker} exited {done.returncode}: "
                                f"{' | '.join(tail)}; restart it by hand and run the roll again")

    return restart


def registrations(client: KazooClient, brokers: list[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for b in brokers:
        try:
            data, _ = client.get(codec.broker_path(b))
            reg = codec.decode_broker(b, data)
            out[b] = {"host": reg.host, "port": reg.port}
        except (NoNodeError, PlannerError):
            continue
    return out


def roll_folder(plan_path: Path | str, out: Path | str | None) -> Path:
    """progress.json and outcome.json of a roll: `out`, else `roll/` in the plan's records folder."""
    return Path(out) if out is not None else records_folder(plan_path) / "roll"


def roll_step(req: RollRequest, *, progress: Callable[[Any], None] | None = None,
              restart: Callable[[int], None] | None = None, mark: tuple[str, str] | None = None) -> RollResult:
    """The roll as a whole step, for a RollRequest as it is: read and check the plan (before any connection),
    open the session, run the roll (or record a person's `mark`), write `<run>/roll/outcome.json`
    (progress.json while it runs). `restart`: a callable that restarts a broker (an embedder's; else
    `req.restart_command`, or someone else does). The roll's options are built here; nothing given is changed."""
    from dataclasses import asdict

    from planner.plan_model import apply_schedule, read_plan

    zk, plan_path, out, part, restart_command = req.zk, req.plan, req.out, req.part, req.restart_command
    if restart is not None and restart_command is not None:
        raise BadInput("give a restart command or a restart callable, not both")
    for name, value in (("poll", req.poll), ("restart timeout", req.restart_timeout),
                        ("gate timeout", req.gate_timeout)):
        if not value > 0:
            raise BadInput(f"{name} must be positive, got {value}")
    if req.lock_wait < 0:
        raise BadInput(f"lock wait must be zero or more, got {req.lock_wait}")
    if req.bootstrap is not None:
        kraftsteps.check_request(req)
    elif zk is None:
        raise BadInput("give either a ZooKeeper connect string or Kafka bootstrap servers")
    else:
        zkmod.parse_connect(zk)
    plan = read_plan(plan_path)
    if plan.kind != "restart":
        raise WrongPlanKind(f"{plan_path} is a {plan.kind} plan", plan.kind, str(plan_path))
    if req.throttle is not None:   # the temporary replicas copy through the executor: apply's floor and limits
        from planner.execution.planview import from_plan
        from planner.execution.steps import check_throttle

        check_throttle(from_plan(plan), req.throttle)
    if restart_command is not None:
        _check_template(restart_command)
    if req.throttle is not None and req.no_throttle:
        raise BadInput("give either a throttle or no_throttle, not both")
    if part in (None, "protect") and mark is None:
        # the temporary replicas copy data: never at full speed by accident (docs/APPLY.md "Throttles")
        refusal = apply_schedule(plan, req.throttle, req.no_throttle).refusal
        if refusal:
            raise NoThrottle(refusal)
    if part not in (None, "protect", "step", "finish"):
        raise BadInput(f"part must be protect, step or finish, got {part!r}")
    folder = check_records(roll_folder(plan_path, out), plan.id, RECORDS, Path(plan_path),
                           "out" if out is not None else "the roll's records folder", out is not None)
    order = [int(b) for b in plan.section("roll")["order"]]

    def go(cluster: Any, regs: Callable[[list[int]], dict[int, dict[str, Any]]]) -> RollResult:
        nonlocal restart
        if restart_command is not None:
            restart = command_restarter(restart_command, req.command_timeout, regs(order))
        options = RollOptions(throttle=req.throttle, poll=req.poll, restart_timeout=req.restart_timeout,
                              gate_timeout=req.gate_timeout, lock_wait=req.lock_wait,
                              keep_temporary=req.keep_temporary, pause=req.pause, restart=restart,
                              wait_restart=req.wait_restart, progress_file=folder / "progress.json",
                              run=req.run or str(records_folder(plan_path)), reason=req.reason, stop=req.stop)
        roll = Roll(cluster, plan, options, progress)
        return roll.mark(mark[0], mark[1]) if mark is not None else roll.run(part, req.step)

    if req.bootstrap is not None:
        from planner.execution.kraftroll import KraftRollCluster

        with kraftsteps.session(req) as store:
            kc = KraftRollCluster(store, plan, req.poll, req.lease, req.bootstrap)
            result = go(kc, kc.registrations)
    else:
        with zkmod.session(zk, auth=req.auth, timeout=req.timeout) as client:
            zkmod.require_kafka(client)
            result = go(client, lambda brokers: registrations(client, brokers))
    write_json_atomic(folder / "outcome.json", {"command": "roll", **asdict(result)})   # names its plan (plan_id)
    return result


def _check_template(template: str) -> None:
    import shlex

    try:
        parts = shlex.split(template.format(broker=1, host="h", port=9092))
    except (KeyError, IndexError, ValueError) as e:
        raise BadInput(f"restart command {template!r}: {e} (placeholders: {{broker}}, {{host}}, {{port}})") from None
    if not parts:
        raise BadInput("restart command is empty")
