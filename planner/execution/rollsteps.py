"""One broker's step of a restart roll, and the writes a step makes: demote (its leadership moves off:
reordered lists, one reassignment, a preferred election), wait for its restart (its registration replaced),
the gates (back in every ISR it was in, nothing offline or under min ISR that was not before the roll),
restore (its lists written back, a preferred election). Each state change goes through rollrecord's table and
is saved in the transaction that makes the write it names.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from planner import maintenance as mt
from planner.errors import NotConverged, SafetyRefusal
from planner.execution import preflight, rollgates
from planner.execution import runstate as rs
from planner.execution.clusterview import Key
from planner.execution.rollcluster import Elect, Presence, Reorder, RollCluster, Write
from planner.execution.rollrecord import (
    BACK,
    DEMOTED,
    DEMOTING,
    ELECTING,
    ELECTION_CHUNK,
    RESTARTING,
    RESTORE_ELECTING,
    RESTORING,
    STEP_DONE,
    RollOptions,
    Waiting,
    move_step,
)

log = logging.getLogger(__name__)


class BrokerSteps:
    """The per-broker part of planner.execution.roller.Roll (a mixin: it uses the roll's record, reads and saves)."""

    plan: Any
    cluster: RollCluster
    opts: RollOptions
    order: list[int]
    accepted: set[str]
    kafka_version: str
    record: dict[str, Any] | None

    def _read(self, fn: Any) -> Any: ...
    def _save(self, extra: list[Write] | None = None) -> None: ...
    def _event(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...
    def say(self, message: str, broker: int | None = None, state: str = "") -> None: ...
    def _hosted(self, broker: int) -> list[Key]: ...
    def _health(self) -> tuple[set[str], set[str]]: ...
    def _registration(self, broker: int, watch: bool = False) -> Presence: ...

    def _await_absent(self, kind: str, timeout: float, what: str) -> None:
        """Until the controller took the last request of `kind` ("reassign" / "election"; ZooKeeper's admin znode
        gone; nothing to wait for on KRaft, where the Admin API answers once the controller has it)."""
        if not self.cluster.settled(kind, timeout):
            raise NotConverged(f"the controller has not taken the {kind} request for {timeout:.0f} s ({what}); the "
                               "roll stopped. Run it again once the controller has processed it")

    def _submit_reorder(self, entries: list[tuple[Key, tuple[int, ...]]], state: str) -> None:
        """Record `state` and write the reordered lists (ZooKeeper: /admin/reassign_partitions in the same
        fenced transaction; KRaft: AlterPartitionReassignments once the state is committed)."""
        self._await_absent("reassign", self.opts.election_timeout, "a reassignment by someone else")
        self._event(f"{state}: {len(entries)} lists reordered")
        self._save([Reorder(tuple(entries))])

    def _wait_lists(self, entries: list[tuple[Key, tuple[int, ...]]], what: str) -> None:
        limit = time.monotonic() + max(self.opts.election_timeout, 30.0)
        keys = [k for k, _ in entries]
        want = dict(entries)
        while True:
            self.cluster.arm()
            statuses = self.cluster.partitions(keys, states=False)
            off = [k for k in keys if statuses[k].reassigning or statuses[k].replicas != want[k]]
            if not off:
                return
            if time.monotonic() > limit:
                raise NotConverged(f"{what}: {len(off)} reordered lists not in place after "
                                   f"{max(self.opts.election_timeout, 30.0):.0f} s: "
                                   f"{preflight.listing([rollgates.name(k) for k in off])}")
            self.cluster.sleep()

    def _elect(self, keys: list[Key], what: str, state: str | None = None, step: dict | None = None) -> None:
        for j in range(0, len(keys), ELECTION_CHUNK):
            chunk = keys[j: j + ELECTION_CHUNK]
            self._await_absent("election", self.opts.election_timeout, "an election by someone else")
            if step is not None and state is not None:
                move_step(step, state)
            self._event(f"{what}: preferred election for {len(chunk)} partitions")
            self._save([Elect(tuple(chunk))])
            self._await_absent("election", self.opts.election_timeout, f"{what}: the election")

    def _step(self, i: int) -> None:
        st = self.record["steps"][i]
        b = st["broker"]
        n = f"step {i + 1}/{len(self.order)} (broker {b})"
        self._resend(st)
        if st["state"] == "pending":
            self._demote(st, n)
        if st["state"] == "demoting":
            self._wait_lists([((t, p), tuple(new)) for t, p, _old, new in st["demote"]], f"{n} demotion")
            elect = [(t, p) for t, p in st["elect"]]
            if elect:
                self._elect(elect, f"{n} demotion", ELECTING, st)
            move_step(st, DEMOTED)
            self._save()
        if st["state"] == "electing":
            self._await_absent("election", self.opts.election_timeout, f"{n}: the election")
            move_step(st, DEMOTED)
            self._save()
        if st["state"] == "demoted":
            self._check_demoted(st, n)
        if st["state"] == "restarting":
            self._await_restart(st, n)
        if st["state"] == "back":
            self._gates(st, n)
        if st["state"] == "restoring":
            self._wait_lists([((t, p), tuple(old)) for t, p, old, _new in st["demote"]], f"{n} restore")
            self._restore_leaders(st, n)
        if st["state"] == "restore-electing":
            self._await_absent("election", self.opts.election_timeout, f"{n}: the election")
            self._restore_leaders(st, n, elected=not self.cluster.resends)

    def _resend(self, st: dict[str, Any]) -> None:
        """A step found in a state whose write follows its commit (KRaft: the record first, then the Admin call;
        a kplan killed in between never sent it): the same write again, which changes nothing if it was sent
        (rollcluster's docstring). Nothing on ZooKeeper, where the write and its state are one transaction."""
        if not self.cluster.resends:
            return
        if st["state"] == DEMOTING and st.get("demote"):
            self.cluster.resend([Reorder(tuple(((t, p), tuple(new)) for t, p, _old, new in st["demote"]))])
        elif st["state"] == ELECTING and st.get("elect"):
            self.cluster.resend([Elect(tuple((t, p) for t, p in st["elect"]))])
        elif st["state"] == RESTORING and st.get("demote"):
            keys = [(t, p) for t, p, _o, _n in st["demote"]]
            now = self.cluster.partitions(keys, states=False)
            todo = tuple(((t, p), tuple(old)) for t, p, old, new in st["demote"] if now[(t, p)].replicas == tuple(new))
            if todo:
                self.cluster.resend([Reorder(todo)])

    def _demote(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        self._maintenance_ops(b, mt.RESTARTING)   # refuses (writing nothing) a broker someone put in maintenance
        live = self.cluster.live_brokers()
        if b not in live:
            raise SafetyRefusal(f"{n}: broker {b} is not registered; the roll restarts running brokers and stopped "
                                f"before touching it. Start broker {b}, then run the roll again")
        keys = self._hosted(b)
        statuses = self.cluster.partitions(keys)
        mins = self.cluster.min_isr({k[0] for k in keys})
        hurt = {k: v for k, v in rollgates.would_hurt(statuses, b, live, mins, self.kafka_version).items()
                if rollgates.name(k) not in self.accepted}
        if hurt:
            raise SafetyRefusal(f"{n}: broker {b} cannot go down safely now: {len(hurt)} partitions would be offline "
                                f"or under min ISR without it: {preflight.listing(sorted(hurt.values()))}. The roll "
                                f"stopped before touching broker {b}. Wait for their ISRs to recover (or take a new "
                                "snapshot and plan again), then run the roll again")
        held = self.cluster.maintenance().brokers()
        d = rollgates.demotion(statuses, b, live, avoid=held)
        if d.to_avoided:
            self.warn(f"{n}: the leadership of {len(d.to_avoided)} partitions moves to a broker in maintenance (no "
                      f"other registered in-sync replica): {preflight.listing([rollgates.name(k) for k in d.to_avoided])}")
        reg = self._registration(b)
        st.update({"czxid": reg.token, "started_at": rs.now(),
                   "isr_before": {rollgates.name(k): list(s.isr) for k, s in statuses.items() if b in s.isr},
                   "demote": [[k[0], k[1], list(old), list(new)] for k, (old, new) in sorted(d.reorder.items())],
                   "elect": [[k[0], k[1]] for k in d.elect],
                   "led_before": sorted(rollgates.name(k) for k, s in statuses.items() if s.leader == b),
                   "cannot_move": [rollgates.name(k) for k in d.stuck]})
        if d.stuck:
            self.warn(f"{n}: the leadership of {len(d.stuck)} partitions cannot move off broker {b} (no other "
                      f"registered in-sync replica): {preflight.listing(st['cannot_move'])}")
        self.say(f"{n}: demoting broker {b}: {len(d.reorder)} lists reordered, {len(d.elect)} leaders to move",
                 b, "demoting")
        move_step(st, DEMOTING)
        if d.reorder:
            self._submit_reorder([(k, new) for k, (_o, new) in sorted(d.reorder.items())], f"{n} demoting")
        else:
            self._save()

    def _check_demoted(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        keys = self._hosted(b)
        statuses = self.cluster.partitions(keys)
        still = sorted(rollgates.name(k) for k, s in statuses.items() if s.leader == b)
        unexpected = [x for x in still if x not in st.get("cannot_move", ())]
        if unexpected:
            self.warn(f"{n}: broker {b} still leads {len(unexpected)} partitions after its demotion (the election did "
                      f"not move them): {preflight.listing(unexpected)}; its controlled shutdown moves them")
        reg = self._registration(b)
        if not reg.up or reg.token != st["czxid"]:
            self.warn(f"{n}: broker {b}'s registration changed before the roll asked for its restart")
        move_step(st, RESTARTING)
        st["restart_at"] = rs.now()
        self._event(f"{n}: broker {b} restarting")
        self._save(self._maintenance_ops(b, mt.RESTARTING))
        if self.opts.restart is not None and not st.get("command_run"):
            st["command_run"] = rs.now()
            self._save()
            self.say(f"{n}: restarting broker {b}", b, "restarting")
            self._run_restart(st)
        else:
            self.say(f"{n}: broker {b} may restart now (its leadership is moved off); waiting for it to leave and "
                     f"register again (up to {self.opts.restart_timeout:.0f} s)", b, "restarting")

    def _await_restart(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        limit = float(st.get("restart_at") or rs.now()) + self.opts.restart_timeout
        while True:
            reg = self._registration(b, watch=True)
            # back first: a ZooKeeper registration replaced while no roll watched (a run resumed after the wait)
            # is the restart done, not a leaving to wait on, which past the wait would be reported as not back
            if reg.up and (reg.token != st["czxid"] if reg.token is not None else bool(st.get("left_at"))):
                st["back_at"] = rs.now()
                st["left_at"] = st.get("left_at") or st["back_at"]
                move_step(st, BACK)
                self._event(f"{n}: broker {b} registered again")
                self._save()
                self.say(f"{n}: broker {b} registered again; waiting for its partitions to rejoin the ISRs", b, "back")
                return
            if not st.get("left_at") and self._left(st, reg):
                st["left_at"] = rs.now()
                self.say(f"{n}: broker {b} left ({self._where_left()})", b, "restarting")
            if time.time() <= limit and not self.opts.wait_restart:
                raise Waiting(b, st.get("czxid"))
            if time.time() > limit:
                if st.get("left_at"):
                    what = (f"broker {b} left at {_hms(st['left_at'])} and has not registered again within "
                            f"{self.opts.restart_timeout:.0f} s. Its partitions are running without it (its "
                            "leadership was moved off; the temporary replicas hold min ISR). Start it, then run the "
                            "roll again: it waits for the registration and continues")
                elif reg.token is None:
                    # KRaft: a broker that restarted while no roll watched it looks as it did (the Admin API shows
                    # no registration epoch; fenced and out of its ISRs are seen only while they last)
                    what = (f"the roll cannot tell whether broker {b} restarted: on KRaft the Admin API shows no "
                            "registration epoch, and no run of the roll saw it leave (fenced, or out of an ISR it "
                            f"was in) within {self.opts.restart_timeout:.0f} s of {_hms(st.get('restart_at'))}. Its "
                            "leadership is moved off and the temporary replicas are in place, so restarting it again "
                            "is safe. The roll counts the restart once it sees the broker leave: stop broker "
                            f"{b}, run the roll again while it is down (it records that it left), then start it and "
                            "run the roll again")
                else:
                    what = (f"broker {b} did not restart within {self.opts.restart_timeout:.0f} s (its registration "
                            "is unchanged). Its leadership is moved off, so restarting it now is safe; then run the "
                            "roll again")
                raise NotConverged(f"{n}: {what}")
            self.cluster.sleep()

    def _gates(self, st: dict[str, Any], n: str) -> None:
        b = st["broker"]
        limit = time.monotonic() + self.opts.gate_timeout
        base = self.record.get("baseline", {})
        base_off, base_under = set(base.get("offline", ())), set(base.get("under_min_isr", ()))
        while True:
            live = self.cluster.live_brokers()
            keys = self._hosted(b)
            statuses = self.cluster.partitions(keys)
            problems = []
            if b not in live:
                problems.append(f"broker {b} is not registered")
            behind = rollgates.not_back(statuses, b, st.get("isr_before", {}))
            if behind:
                problems.append(f"{len(behind)} partitions have not got broker {b} back in their ISR: "
                                f"{preflight.listing(behind)}")
            if not problems:
                off, under = self._health()
                new_off, new_under = sorted(off - base_off), sorted(under - base_under)
                if new_off:
                    problems.append(f"{len(new_off)} partitions are offline: {preflight.listing(new_off)}")
                if new_under:
                    problems.append(f"{len(new_under)} partitions are under min ISR: {preflight.listing(new_under)}")
            if not problems:
                break
            if time.monotonic() > limit:
                raise NotConverged(f"{n}: the gates did not pass within {self.opts.gate_timeout:.0f} s: "
                                   + "; ".join(problems) + f". The roll stopped before restoring broker {b}'s "
                                   "leadership and before the next broker (the temporary replicas stay). Run the roll "
                                   "again to keep waiting, or look at broker " + str(b) + "'s log")
            self.cluster.sleep()
        self.say(f"{n}: gates passed (registered, back in every ISR, nothing offline or under min ISR)", b, "restoring")
        back = [((t, p), tuple(old)) for t, p, old, new in st.get("demote", ())]
        statuses = self.cluster.partitions([k for k, _ in back], states=False) if back else {}
        todo = [(k, old) for (k, old), (_t, _p, _o, new) in zip(back, st["demote"], strict=True)
                if statuses[k].replicas == tuple(new)]
        moved = [rollgates.name(k) for (k, old), (_t, _p, _o, new) in zip(back, st["demote"], strict=True)
                 if statuses[k].replicas not in (tuple(new), old)]
        if moved:
            self.warn(f"{n}: {len(moved)} partitions were reassigned by someone else during the step; their lists are "
                      f"left as they are: {preflight.listing(moved)}")
        move_step(st, RESTORING)
        if todo:
            self._submit_reorder(todo, f"{n} restoring")
        else:
            self._save()

    def _restore_leaders(self, st: dict[str, Any], n: str, elected: bool = False) -> None:
        """A preferred election for the partitions the broker is the preferred leader of (where it is in the
        ISR), then the gate: every partition it led before its demotion and is the preferred leader of is led
        by it again."""
        b = st["broker"]
        limit = time.monotonic() + self.opts.gate_timeout
        keys = self._hosted(b)
        if not elected:
            statuses = self.cluster.partitions(keys)
            want = [k for k, s in statuses.items() if s.replicas and s.replicas[0] == b and s.leader != b
                    and b in s.isr]
            if want:
                self._elect(want, f"{n} restore", RESTORE_ELECTING, st)
        led = set(st.get("led_before", ()))
        retried = False
        while True:
            statuses = self.cluster.partitions(keys)
            off = [x for x in rollgates.not_led(statuses, b) if x.rsplit(" (", 1)[0] in led]
            if not off:
                break
            if time.monotonic() > limit:
                raise NotConverged(f"{n}: broker {b}'s leadership is not restored after {self.opts.gate_timeout:.0f} "
                                   f"s: {preflight.listing(off)}. Run the roll again to retry the election")
            if not retried and time.monotonic() > limit - self.opts.gate_timeout / 2:
                retried = True   # once more, half way: an election can miss a replica that joined the ISR late
                again = [k for k, s in statuses.items() if rollgates.name(k) in led and s.replicas
                         and s.replicas[0] == b and s.leader != b and b in s.isr]
                if again:
                    self._elect(again, f"{n} restore (again)")
                    continue
            self.cluster.sleep()
        for key in ("isr_before", "demote", "elect", "led_before"):
            st.pop(key, None)
        move_step(st, STEP_DONE)
        st["done_at"] = rs.now()
        self._event(f"{n}: done")
        self._save(self._maintenance_ops(b, None))
        self.say(f"{n}: broker {b} restarted, leadership restored", b, "done")

    def _maintenance_ops(self, broker: int, state: str | None) -> list[Write]:
        """The writes that put `broker` into maintenance state `restarting` while it restarts, or take it out
        after (planner/maintenance.py's table: only this roll's plan may), for the roll's own transactions."""
        states = self.cluster.maintenance()
        i = self.order.index(broker) + 1
        why = f"restart roll of brokers {','.join(map(str, self.order))}: step {i}/{len(self.order)}"
        return self.cluster.maintenance_writes(states, broker, state, plan_id=self.plan.id, run=self.opts.run,
                                               reason=f"{self.opts.reason} ({why})" if self.opts.reason else why,
                                               by=mt.identity("roll"))

    def _left(self, st: dict[str, Any], reg: Presence) -> bool:
        """Has the broker left since its step recorded it? ZooKeeper: its registration znode gone or replaced.
        KRaft (no registration epoch in the Admin API): fenced or gone from DescribeCluster (the controller fences
        a broker at the end of its controlled shutdown, and one whose heartbeats stop:
        ReplicationControlManager.processBrokerHeartbeat SHUTDOWN_NOW / maybeFenceOneStaleBroker ->
        handleBrokerFenced), or, once this roll ran the restart, out of an ISR it was in (a controlled shutdown
        takes it out of every ISR first: handleBrokerInControlledShutdown)."""
        if not reg.up or (reg.token is not None and reg.token != st["czxid"]):
            return True
        if reg.token is not None or not st.get("command_run"):
            return False
        before = [(t, int(p)) for t, p in (x.rsplit("-", 1) for x, isr in st.get("isr_before", {}).items()
                                           if st["broker"] in isr)]
        now = self.cluster.partitions(before) if before else {}
        return any(s.replicas is not None and st["broker"] not in s.isr for s in now.values())

    def _where_left(self) -> str:
        return "/brokers/ids" if self.cluster.backend == "zookeeper" else "fenced, or out of its ISRs"

    def _run_restart(self, st: dict[str, Any]) -> None:
        """The restart callable (the operator's command, or an embedder's), watched while it runs: a command that
        returns only once the broker is back would otherwise hide its leaving where the backend keeps no trace of
        it (KRaft). Its error, if any, is raised here."""
        b = st["broker"]
        restart = self.opts.restart
        assert restart is not None
        failed: list[BaseException] = []

        def run() -> None:
            try:
                restart(b)
            except BaseException as e:  # noqa: BLE001 - raised again in the roll's thread
                failed.append(e)

        th = threading.Thread(target=run, name=f"kplan-restart-{b}", daemon=True)
        th.start()
        while th.is_alive():
            if not st.get("left_at") and self._left(st, self._registration(b)):
                st["left_at"] = rs.now()   # recorded: a roll killed after this still knows the broker left
                self._event(f"broker {b} left while its restart ran")
                self._save()
                self.say(f"broker {b} left ({self._where_left()}) while its restart ran; recorded in "
                         f"{rs.now() - st['left_at']:.1f} s", b, "restarting")
            th.join(self.opts.poll)
        if failed:
            raise failed[0]


def _hms(t: Any) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(float(t))) if isinstance(t, int | float) else "?"
