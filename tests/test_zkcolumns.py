"""Bulk decoding of znode data into columns: the same answers as the codec, errors naming the path."""

from __future__ import annotations

import json

from planner import zkcolumns


def _state(leader, epoch, isr, lrs=None, ctrl=1):
    obj = {"controller_epoch": ctrl, "leader": leader, "version": 1, "leader_epoch": epoch, "isr": isr}
    if lrs is not None:
        obj["leader_recovery_state"] = lrs
    return json.dumps(obj, separators=(",", ":")).encode()


def test_bulk_state_decoding_with_bad_blobs_in_a_large_batch():
    n = 5000
    blobs = [_state(i % 7, i, [i % 7, (i + 1) % 7]) for i in range(n)]
    blobs[1234] = b'{"leader":"x","isr":[1]}'   # wrong type: Arrow refuses the whole batch
    blobs[4000] = b'{"leader":1,"leader_epoch":2,"isr":[1]}'  # missing controller_epoch
    blobs[4500] = _state(2, 9, [2], lrs=1)
    # digit strings: Kafka's own parser (Jackson's to[Int]) refuses them, and so does the planner (issue 9)
    blobs[10] = b'{"controller_epoch":3,"leader":"4","leader_epoch":"5","isr":[4]}'
    table, bad = zkcolumns.decode_state_blobs(blobs, lambda i: f"/brokers/topics/t/partitions/{i}/state")
    assert table.num_rows == n
    assert bad == [(10, "'leader' must be an integer, got \"4\""), (1234, "'leader' must be an integer, got \"x\""),
                   (4000, "missing required key 'controller_epoch'")]
    rows = table.to_pylist()
    assert rows[0] == {"leader": 0, "leader_epoch": 0, "controller_epoch": 1, "isr": [0, 1], "leader_recovery_state": 0}
    assert rows[10]["leader"] is None
    assert rows[1234]["leader"] is None and rows[4000]["isr"] is None
    assert rows[4500] == {"leader": 2, "leader_epoch": 9, "controller_epoch": 1, "isr": [2], "leader_recovery_state": 1}
    assert rows[4999] == {"leader": 4999 % 7, "leader_epoch": 4999, "controller_epoch": 1,
                          "isr": [4999 % 7, 5000 % 7], "leader_recovery_state": 0}


def test_blobs_that_would_shift_lines_are_decoded_one_by_one():
    blobs = [_state(1, 0, [1]), b"", b'{"leader":2,\n"leader_epoch":1,"controller_epoch":1,"isr":[2]}',
             _state(3, 4, [3])]
    table, bad = zkcolumns.decode_state_blobs(blobs, lambda i: f"/s/{i}")
    assert [r["leader"] for r in table.to_pylist()] == [1, None, 2, 3]
    assert bad == [(1, "empty znode, expected JSON")]


def test_topic_rows_validate_everything_at_once():
    ids, lengths, flat = zkcolumns.topic_rows(["0", "1", "10"], [[1, 2], [3], [2, 1, 3]])
    assert ids.tolist() == [0, 1, 10] and lengths.tolist() == [2, 1, 3] and flat.tolist() == [1, 2, 3, 2, 1, 3]
    assert zkcolumns.topic_rows(["0"], [[1, True]]) is None       # a bool is not a broker id
    assert zkcolumns.topic_rows(["x"], [[1]]) is None
    assert zkcolumns.topic_rows(["0"], [[-1]]) is None
    assert zkcolumns.topic_rows(["0"], [[2**31]]) is None
    assert zkcolumns.topic_rows(["0"], ["1,2"]) is None
    assert zkcolumns.duplicate_rows(lengths, flat.astype("int64")).tolist() == []
    assert zkcolumns.duplicate_rows(lengths[[0, 2]], [1, 1, 2, 1, 3]).tolist() == [0]
