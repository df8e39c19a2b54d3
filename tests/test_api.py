"""The library facade (planner.api), the plan model, the run folder and the error attributes schedulers use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from plan_support import write_plan_folder

from planner import api, cli
from planner.codec import ReassignEntry
from planner.errors import BadInput, PlannerError, ZkUnavailable
from planner.plan_model import batch_file_name, read_plan
from planner.runfolder import RunFolder, step_output
from planner.synth import synth_cluster, to_snapshot

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def snap(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("api")
    return to_snapshot(synth_cluster(brokers=6, partitions=120, rf=3, racks=3, seed=3), d / "snap")


def test_errors_tell_transient_from_bad_input():
    assert not issubclass(ZkUnavailable, BadInput)
    assert ZkUnavailable("x").retryable and ZkUnavailable.exit_code == 2
    assert not BadInput("x").retryable and BadInput.exit_code == 2
    assert PlannerError.exit_code == 1


def test_facade_and_plan_reader_load_no_solver_no_spark_no_airflow(snap, tmp_path):
    out = api.plan_drain(api.DrainRequest(snapshot=snap, out=tmp_path / "plan", brokers=(2,))).path
    code = (
        "import sys; import planner.api as a\n"
        "heavy = ('ortools', 'pyspark', 'airflow', 'kazoo')\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in heavy], 'import'\n"
        f"p = a.read_plan({str(out)!r})\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'ortools', 'pyspark', 'airflow'})\n"
        "print(p.id, p.kind, len(p.moves), loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert done.returncode == 0, done.stderr
    pid, kind, n, loaded = done.stdout.split(" ", 3)
    doc = json.loads((out / "plan.json").read_text())
    assert (pid, kind, int(n), loaded.strip()) == (doc["id"], "drain", len(doc["moves"]), "[]")


def test_same_inputs_same_plan_id_whoever_calls(snap, tmp_path, monkeypatch):
    via_api = api.plan_drain(api.DrainRequest(snapshot=snap, out=tmp_path / "a", brokers=(1, 4)))
    monkeypatch.chdir(snap.parent)   # the CLI is given a relative snapshot path: not part of the plan's id
    assert cli.main(["plan", "drain", "--snapshot", snap.name, "--brokers", "1,4", "--out",
                     str(tmp_path / "b"), "--quiet"]) == 0
    assert read_plan(tmp_path / "b").id == via_api.plan_id == via_api.plan.id
    assert (tmp_path / "a" / "plan.json").read_bytes() == (tmp_path / "b" / "plan.json").read_bytes()
    solve = json.loads((tmp_path / "b" / "solve.json").read_text())
    assert solve["inputs"]["snapshot"] == snap.name and solve["plan_id"] == via_api.plan_id


def test_plan_model_is_frozen_and_typed(snap, tmp_path):
    plan = api.plan_drain(api.DrainRequest(snapshot=snap, out=tmp_path / "p", brokers=(3,))).plan
    doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert plan.drained_brokers == (3,) and plan.kind == "drain"
    assert plan.snapshot_fingerprint == json.loads((snap / "manifest.json").read_text())["fingerprint"]
    assert [(m.topic, m.partition, list(m.to_replicas)) for m in plan.moves] == \
        [(m["topic"], m["partition"], m["to"]) for m in doc["moves"]]
    assert all(3 not in e.replicas for e in plan.reassignment)
    assert plan.summary["replica_moves"] == doc["summary"]["replica_moves"]
    with pytest.raises(FrozenInstanceError):
        plan.id = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.parameters["brokers"] = [1]  # type: ignore[index]


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_read_plan_checks_every_file_and_tolerates_additions(snap, tmp_path):
    good = api.plan_drain(api.DrainRequest(snapshot=snap, out=tmp_path / "p", brokers=(2, 5))).path
    doc = json.loads((good / "plan.json").read_text())
    # the writer puts every batch in its own file (Kafka's format), listed in plan.json with its checksum
    names = {batch_file_name(b["index"]) for b in doc["batches"]}
    assert [b["file"] for b in doc["batches"]] == [batch_file_name(b["index"]) for b in doc["batches"]]
    assert names <= set(doc["files"]) and all((good / n).is_file() for n in names)
    # additions a newer writer may make: an unknown file
    d = _copy(good, tmp_path / "extra")
    (d / "notes.txt").write_text("hello")
    assert read_plan(d).id == doc["id"]
    # a batch file that differs from its batch, one missing, one for a batch that does not exist
    last = doc["batches"][-1]
    entries = [{"topic": t, "partition": p, "replicas": list(reversed(r))}
               for (t, p), r in zip(last["partitions"], last["replicas"], strict=True)]
    (d / batch_file_name(last["index"])).write_text(json.dumps({"version": 1, "partitions": entries}))
    with pytest.raises(BadInput, match=f"{batch_file_name(last['index'])}: checksum does not match"):
        read_plan(d)
    (d / batch_file_name(last["index"])).unlink()
    with pytest.raises(BadInput, match=f"{batch_file_name(last['index'])} is missing"):
        read_plan(d)
    d = _copy(good, tmp_path / "stray")
    (d / batch_file_name(999)).write_text(json.dumps({"version": 1, "partitions": entries}))
    with pytest.raises(BadInput, match="names batch 999"):
        read_plan(d)
    # reassignment.json edited: one target changed (plan.json records every file's checksum)
    assert set(doc["files"]) == {"reassignment.json", "rollback.json"} | names
    d = _copy(good, tmp_path / "edited")
    ra = json.loads((d / "reassignment.json").read_text())
    ra["partitions"][0]["replicas"] = ra["partitions"][0]["replicas"][::-1]
    (d / "reassignment.json").write_text(json.dumps(ra))
    with pytest.raises(BadInput, match="reassignment.json: checksum does not match the one plan.json records"):
        read_plan(d)
    # without checksums (a hand-made plan), the files are still held to the moves
    snap_doc = json.loads((snap / "manifest.json").read_text())
    m = doc["moves"][0]
    d = write_plan_folder(tmp_path / "hand", snap_doc["fingerprint"], {(m["topic"], m["partition"]): m["from"]},
                          [ReassignEntry(m["topic"], m["partition"], tuple(m["to"]))])
    assert read_plan(d).moves[0].to_replicas == tuple(m["to"])
    ra = json.loads((d / "reassignment.json").read_text())
    ra["partitions"][0]["replicas"] = ra["partitions"][0]["replicas"][::-1]
    (d / "reassignment.json").write_text(json.dumps(ra))
    with pytest.raises(BadInput, match="reassignment.json: does not match the moves"):
        read_plan(d)
    d = _copy(good, tmp_path / "partial")
    (d / "rollback.json").unlink()
    with pytest.raises(BadInput, match="lacks rollback.json"):
        read_plan(d)
    with pytest.raises(BadInput, match="does not exist"):
        read_plan(tmp_path / "nowhere")


def test_step_output_is_complete_or_absent(tmp_path):
    out = tmp_path / "step"
    with pytest.raises(RuntimeError):
        with step_output(out) as tmp:
            (tmp / "half.json").write_text("{}")
            raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt):
        with step_output(out) as tmp:
            (tmp / "half.json").write_text("{}")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []           # neither the step nor a temporary folder is left
    with step_output(out) as tmp:
        (tmp / "a.json").write_text("1")
    assert (out / "a.json").read_text() == "1"
    with pytest.raises(BadInput, match="not empty"):
        with step_output(out) as tmp:
            pass
    with step_output(out, force=True) as tmp:
        (tmp / "b.json").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["b.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="is a file"):
        with step_output(tmp_path / "file"):
            pass
    with pytest.raises(BadInput, match="would replace the input"):
        with step_output(tmp_path, force=True, inputs=(out,)):
            pass
    with pytest.raises(BadInput, match="inside the input folder"):
        with step_output(out / "sub", inputs=(out,)):
            pass


def test_run_folder_layout(tmp_path):
    rf = RunFolder(tmp_path / "run")
    assert (rf.snapshot, rf.risk, rf.plan, rf.risk_after, rf.apply, rf.verify, rf.report) == tuple(
        tmp_path / "run" / n for n in ("snapshot", "risk", "plan", "risk-after", "apply", "verify", "report.json"))
    with rf.step_writer("plan") as tmp:
        (tmp / "plan.json").write_text("{}")
    assert (rf.plan / "plan.json").is_file()
    rf.write_report(b'{"ok": true}\n')
    assert json.loads(rf.report.read_text()) == {"ok": True}


def test_run_folder_readers_answer_from_the_steps_own_files(snap, tmp_path):
    """What the Airflow layer asks instead of naming the files: a step is complete when the file the planner
    writes last is there; a reader gives None for a step that has not run or did not finish."""
    rf = RunFolder(tmp_path / "run")
    assert not any(rf.complete(s) for s in ("snapshot", "risk", "risk_after", "plan"))
    assert (rf.manifest(), rf.risk_summary(), rf.risk_summary(after_plan=True)) == (None, None, None)
    assert (rf.progress("apply"), rf.outcome("apply"), rf.progress("verify"), rf.progress("roll")) == (None,) * 4
    with rf.step_writer("snapshot") as tmp:   # a real snapshot, copied in
        for f in snap.iterdir():
            (tmp / f.name).write_bytes(f.read_bytes())
    assert rf.complete("snapshot") and rf.manifest()["fingerprint"] == api.read_snapshot(snap).manifest["fingerprint"]
    rf.plan.mkdir(parents=True)
    (rf.plan / "rollback.json").write_text("{}")   # a folder without its main file is not a plan
    assert not rf.complete("plan") and not api.step_complete(rf.plan, "plan")
    rf.risk_after.mkdir()
    (rf.risk_after / "summary.json").write_text('{"level": "low"}')
    (rf.root / "risk").mkdir()
    (rf.root / "risk" / "summary.json").write_text("{not json")
    assert rf.risk_summary(after_plan=True) == {"level": "low"} and rf.risk_summary() is None
    (rf.root / "roll").mkdir()
    (rf.root / "roll" / "outcome.json").write_text('{"state": "completed"}')
    assert rf.outcome("roll") == {"state": "completed"} and rf.outcome("apply") is None
    with pytest.raises(ValueError):
        rf.complete("apply")


def test_apply_verify_cancel_refuse_bad_input_before_connecting(tmp_path):
    from planner.errors import BadInput

    req = api.ApplyRequest(zk="127.0.0.1:2181", plan=tmp_path, auth=("u", "secret"))
    assert "secret" not in repr(req)
    for fn, r in ((api.apply, req), (api.verify, api.VerifyRequest(zk="h:1", plan=tmp_path)),
                  (api.cancel, api.CancelRequest(zk="h:1", plan=tmp_path))):
        with pytest.raises(BadInput, match="plan.json"):
            fn(r)


def test_a_copy_with_no_rate_is_refused_as_a_fact_that_each_caller_words(tmp_path, capsys):
    """Issue 23 item 6: the library states what is wrong (NoThrottle, naming no flag); the CLI adds the remedy
    in its words (the Airflow layer in its own: kplan_airflow.operators.NO_THROTTLE_REMEDY). Nothing connects."""
    plan = write_plan_folder(tmp_path / "plan", "sha256:" + "0" * 64, {("t", 0): [1, 2]},
                             [ReassignEntry("t", 0, (1, 3))])
    with pytest.raises(api.NoThrottle) as e:
        api.apply(api.ApplyRequest(zk="127.0.0.1:1", plan=plan))
    fact = str(e.value)
    assert fact.startswith("1 data batches of plan sha256:") and fact.endswith(
        "would copy with no replication throttle (the plan was made without partition sizes, so it suggests no "
        "rate)")
    assert e.value.exit_code == 2 and "--" not in fact and "kplan" not in fact
    assert cli.main(["apply", "--zk", "127.0.0.1:1", "--plan", str(plan)]) == 2
    assert capsys.readouterr().err == f"kplan apply: error: {fact}: give a throttle (--throttle RATE, e.g. 50MB), " \
                                      "or say --no-throttle to copy at full speed on purpose\n"


def test_plan_files_are_exactly_what_kafkas_format_writes(snap, tmp_path):
    """The writer formats every reassignment / batch file's entries as text (no dict per partition): each file
    is byte for byte what the znode codec (codec.encode_reassignment, json.dumps underneath) writes for the
    lists it holds, plus a newline; reassignment.json / rollback.json hold the snapshot's lists and the moves'
    targets; a drain's leadership batch holds the partitions' current replicas with a kept broker first (not
    their final lists), its data batches the final lists; a bytes rebalance with many batches alike."""
    from planner import codec
    from planner.snapshot_io import read_snapshot

    s = read_snapshot(snap)
    current = {(t, int(p)): [int(b) for b in r] for t, p, r in zip(
        s.partitions.column("topic").to_pylist(), s.partitions.column("partition").to_pylist(),
        s.partitions.column("replicas").to_pylist(), strict=True)}
    big = to_snapshot(synth_cluster(brokers=9, partitions=900, rf=[1, 2, 3, 3], racks=3, empty_brokers=2, seed=8),
                      tmp_path / "big")
    plans = [api.plan_drain(api.DrainRequest(snapshot=snap, out=tmp_path / "d", brokers=(1,))).path,
             api.plan_rebalance(api.RebalanceRequest(snapshot=big, out=tmp_path / "r",
                                                     max_concurrent_per_broker=1)).path]
    for folder in plans:
        doc = json.loads((folder / "plan.json").read_text())
        files = ["reassignment.json", "rollback.json"] + [b["file"] for b in doc["batches"]]
        for name in files:
            data = (folder / name).read_bytes()
            entries = codec.decode_reassignment_file(data, name)
            assert codec.encode_reassignment(entries) + b"\n" == data, (folder, name)
        lists = {name: {(e.topic, e.partition): list(e.replicas) for e in codec.decode_reassignment_file(
            (folder / name).read_bytes())} for name in files}
        assert lists["reassignment.json"] == {(m["topic"], m["partition"]): m["to"] for m in doc["moves"]}
        assert lists["rollback.json"] == {(m["topic"], m["partition"]): m["from"] for m in doc["moves"]}
        for b in doc["batches"]:
            got = lists[b["file"]]
            assert list(got) == [tuple(p) for p in b["partitions"]]
            if b["kind"] == "data":
                assert all(got[k] == lists["reassignment.json"][k] for k in got)
        assert read_plan(folder).id == doc["id"]
    drain = json.loads((plans[0] / "plan.json").read_text())
    lead = {(e.topic, e.partition): list(e.replicas) for e in codec.decode_reassignment_file(
        (plans[0] / drain["batches"][0]["file"]).read_bytes())}
    target = {(m["topic"], m["partition"]): m["to"] for m in drain["moves"]}
    assert drain["batches"][0]["kind"] == "leadership"
    from_drained = [k for k in lead if current[k][0] == 1]
    assert from_drained and all(lead[k] != target[k] for k in from_drained)
    for k in from_drained:       # led from the drained broker: its current replicas, a kept one first
        assert sorted(lead[k]) == sorted(current[k]) and lead[k][0] != 1, (k, lead[k])
    rebalance = json.loads((plans[1] / "plan.json").read_text())
    assert len(rebalance["batches"]) >= 20 and rebalance["summary"]["balance"] == "bytes"
