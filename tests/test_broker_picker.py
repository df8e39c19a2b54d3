"""The trigger forms' broker picker (kplan_airflow.form), parsed as the dag-processor parses the DAG files:
before any snapshot, a plain list of ids; once a snapshot recorded the cluster's brokers, a multi-select of
them with their racks (and down / in maintenance), and the same validation either way: ids as Airflow's
multi-select sends them (strings of digits) or as integers, at least one, no repeats, nothing negative or
not a number."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import airflow_support as af

CODE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions.param import ParamValidationError

bag = DagBag(dag_folder=sys.argv[1], safe_mode=False)
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}}
for dag_id in ("kafka_broker_drain", "kafka_broker_return", "kafka_broker_restart"):
    p = bag.dags[dag_id].params.get_param("brokers")
    ok = {}
    for v in (["1", "3"], [2], ["3", 1], [], ["1", "1"], ["-1"], [-1], ["x"], ["1,2"], "1"):
        try:
            p.resolve(v)
            ok[json.dumps(v)] = True
        except ParamValidationError:
            ok[json.dumps(v)] = False
    out[dag_id] = {"schema": p.schema, "ok": ok, "description": p.description}
print(json.dumps(out))
"""


def parse(runs_root) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW__KPLAN__RUNS_ROOT=str(runs_root), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW_HOME=str(runs_root.parent / "home"))
    r = subprocess.run([sys.executable, "-c", CODE, str(af.local.DAGS)], capture_output=True, text=True,
                       timeout=180, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    return out


VALID = {'["1", "3"]': True, "[2]": True, '["3", 1]': True, "[]": False, '["1", "1"]': False, '["-1"]': False,
         "[-1]": False, '["x"]': False, '["1,2"]': False, '"1"': False}


def test_broker_picker_before_and_after_a_snapshot(tmp_path):
    from kplan_airflow import form

    root = tmp_path / "runs"
    before = parse(root)
    for dag_id in ("kafka_broker_drain", "kafka_broker_return", "kafka_broker_restart"):
        assert "examples" not in before[dag_id]["schema"]     # nothing known yet: ids typed in
        assert before[dag_id]["ok"] == VALID
    # the brokers as the snapshot task records them (rows of the snapshot's brokers table)
    rows = [{"broker": 3, "rack": "r3", "alive": False, "maintenance": "drained"},
            {"broker": 1, "rack": "r1", "alive": True, "maintenance": None},
            {"broker": 2, "rack": None, "alive": True, "maintenance": None}]
    os.environ["AIRFLOW__KPLAN__RUNS_ROOT"] = str(root)
    try:
        form.write_known_brokers(rows, "2026-11-25T21:00:00Z", "zookeeper_default")
    finally:
        del os.environ["AIRFLOW__KPLAN__RUNS_ROOT"]
    after = parse(root)
    for dag_id in ("kafka_broker_drain", "kafka_broker_return", "kafka_broker_restart"):
        schema = after[dag_id]["schema"]
        assert schema["type"] == "array" and schema["examples"] == ["1", "2", "3"]   # Airflow's multi-select
        assert schema["values_display"] == {"1": "broker 1 · rack r1", "2": "broker 2",
                                            "3": "broker 3 · rack r3 (down, drained)"}
        assert "2026-11-25T21:00:00Z" in after[dag_id]["description"]
        assert after[dag_id]["ok"] == VALID
