"""Whether a plan needs a person's approval, and why: a pure function of the DAG's policy and the plan's figures.

The publish task (kplan_airflow.operators.PublishOperator) asks it; nothing here reads files, Airflow or the
clock. Two kinds of policy:
- no auto-approve limits (drain, return, restart): every plan is reviewed, unless the DAG says otherwise or,
  when it does not say, the deployment skips review (`[kplan] skip_review`);
- auto-approve limits (the nightly rebalance): a plan within every given limit (replica moves, bytes to copy,
  the worst risk level after the plan) is applied without a person; over any, the reasons are shown.
Either way a drain that would not empty its brokers is never applied without a person seeing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LEVELS = ("low", "medium", "high", "critical")
NOT_EMPTIED = "the drain would not empty its brokers (see the warning)"


def level_rank(level: str | None) -> int:
    """low < medium < high < critical < unknown (an unknown level never passes a limit)."""
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


def _opt_int(value: Any) -> int | None:
    return None if value in (None, "", "None") else int(value)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off", "none")
    return bool(value)


@dataclass(frozen=True)
class Policy:
    """The DAG's approval settings as its operator got them (templated strings or values)."""

    require_approval: Any = None          # None / "": the deployment decides (skip_review)
    max_moves: Any = None
    max_bytes: Any = None
    max_risk: str | None = None

    @property
    def has_limits(self) -> bool:
        return any(v not in (None, "") for v in (self.max_moves, self.max_bytes, self.max_risk))


@dataclass(frozen=True)
class Decision:
    """`reason` None: apply without a person; else why a person must look. `shown`: the reason as the
    approval and the plan page show it (only where auto-approve limits exist, to say why they did not apply)."""

    reason: str | None
    shown: str | None

    @property
    def review(self) -> bool:
        return self.reason is not None


def decide(policy: Policy, *, moves: int, nbytes: int | None, risk_after: str | None, skip_review: bool,
           drain_empties: bool = True) -> Decision:
    """Whether a plan with these figures needs review under `policy` (module docstring)."""
    from kplan_airflow.summary import human_bytes

    reasons: list[str] = []
    if not policy.has_limits:
        required = not skip_review if policy.require_approval in (None, "", "None") else _truthy(
            policy.require_approval)
        if required:
            reasons.append("every plan of this DAG is reviewed")
    else:
        max_moves, max_bytes = _opt_int(policy.max_moves), _opt_int(policy.max_bytes)
        if max_moves is not None and moves > max_moves:
            reasons.append(f"{moves} replica moves is over the auto-approve limit of {max_moves}")
        if max_bytes is not None and nbytes is None:
            reasons.append(f"bytes to move unknown (auto-approve needs them within {human_bytes(max_bytes)})")
        elif max_bytes is not None and nbytes > max_bytes:
            reasons.append(f"{human_bytes(nbytes)} to move is over the auto-approve limit of {human_bytes(max_bytes)}")
        if policy.max_risk and level_rank(risk_after) > level_rank(policy.max_risk):
            reasons.append(f"risk after the plan is {str(risk_after).upper()} (auto-approve up to "
                           f"{policy.max_risk.upper()})")
    if not drain_empties:
        reasons.append(NOT_EMPTIED)
    reason = "; ".join(reasons) or None
    return Decision(reason, reason if policy.has_limits else None)
