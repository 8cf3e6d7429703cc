"""Stacked bars of a trainer step (bench/train_profile.py's columns), shared by the records' plot scripts."""


def stacked_step_bars(ax, labels: list[str], rows: list[dict[str, float]]) -> None:
    """One bar per row: the frozen target's forward, the drafter's forward with its losses (forward − target), and
    the backward with AdamW; rows hold train_profile's ms `target`, `forward` and `backward`."""
    target = [r["target"] for r in rows]
    drafter = [r["forward"] - r["target"] for r in rows]
    ax.bar(labels, target, label="target forward (frozen)")
    ax.bar(labels, drafter, bottom=target, label="drafter forward + losses")
    ax.bar(labels, [r["backward"] for r in rows], bottom=[t + d for t, d in zip(target, drafter)],
           label="backward + AdamW")
    ax.set_ylabel("ms per optimizer step")
