"""`report.html` of a loop run: plots and tables, self-contained and readable offline."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from simreal_ros.episodes.metadata import CONDITIONS
from simreal_ros.loop.state import LoopSummary


def _figure_png(draw) -> str:
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 3.2), dpi=100)
    try:
        draw(axes)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    finally:
        plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _success_plot(summary: LoopSummary):
    def draw(axes):
        for condition, colour in zip(CONDITIONS, ("tab:blue", "tab:orange"), strict=True):
            points = [
                (record.index, record.score(condition))
                for record in summary.completed_rounds()
                if record.score(condition) is not None
            ]
            if not points:
                continue
            rounds = [index for index, _ in points]
            axes.plot(rounds, [s.rate for _, s in points], "o-", color=colour, label=condition)
            axes.fill_between(
                rounds,
                [s.ci_low for _, s in points],
                [s.ci_high for _, s in points],
                color=colour,
                alpha=0.2,
            )
            checks = [
                (record.index, record.check_score(condition))
                for record in summary.completed_rounds()
                if record.check_score(condition) is not None
            ]
            if checks:
                axes.errorbar(
                    [index + 0.05 for index, _ in checks],
                    [c.rate for _, c in checks],
                    yerr=[
                        [c.rate - c.ci_low for _, c in checks],
                        [c.ci_high - c.rate for _, c in checks],
                    ],
                    fmt="s--",
                    color=colour,
                    capsize=3,
                    label=f"{condition}, off-ROS check ({checks[0][1].episodes} seeds)",
                )
        axes.set_ylim(0, 1)
        axes.set_xlabel("round (0 = zero-shot)")
        axes.set_ylabel("success on the stand-in")
        axes.set_title("Success rate with Wilson 95% CI")
        if axes.get_legend_handles_labels()[0]:
            axes.legend()

    return draw


def _bar_plot(summary: LoopSummary, value, title: str, ylabel: str):
    def draw(axes):
        records = summary.completed_rounds()
        axes.bar([r.index for r in records], [value(r) for r in records], color="tab:gray")
        axes.set_xlabel("round")
        axes.set_ylabel(ylabel)
        axes.set_title(title)

    return draw


def _loss_plot(summary: LoopSummary):
    def draw(axes):
        trained = [r for r in summary.completed_rounds() if r.update and r.update.final_metrics]
        names = sorted({k for r in trained for k in r.update.final_metrics if k.endswith("loss")})
        for name in names:
            points = [(r.index, r.update.final_metrics[name]) for r in trained
                      if name in r.update.final_metrics]  # fmt: skip
            axes.plot(*zip(*points, strict=True), marker="o", label=name)
        axes.set_xlabel("round")
        axes.set_ylabel("loss at the end of the round's training")
        axes.set_title("Learner losses per round")
        if axes.get_legend_handles_labels()[0]:
            axes.legend()

    return draw


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>"
        for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _arm_section(records) -> str:
    """The arm's decisions; a candidate that passed the sim screen and lost on the arm is
    the loop's most important event, so each gets its own box above everything else."""
    decided = [r for r in records if r.arm_decision]
    if not decided:
        return ""
    boxes = []
    for record in decided:
        arm = record.arm_decision
        if arm.get("kind") != "passed_sim_lost_on_arm":
            continue
        diagnosis = record.arm_diagnosis or {}
        boxes.append(
            '<div class="lost"><b>Round '
            f"{record.index}: {html.escape(arm['candidate'])} passed the sim screen and lost "
            f"on the arm; rolled back to {html.escape(arm['incumbent'])}.</b><br>"
            f"{html.escape(arm['reason'])}<br>Diagnosis of its arm episodes: "
            f"<b>{html.escape(str(diagnosis.get('label', '-')))}</b> "
            f"{html.escape(str(diagnosis.get('summary', '')))}</div>"
        )
    rows = [
        [
            str(r.index),
            r.method or "-",
            r.arm_decision["candidate"],
            r.arm_decision["incumbent"],
            r.arm_decision["kind"],
            str(r.arm_decision["pairs"]),
            f"{r.arm_decision['candidate_successes']} vs {r.arm_decision['incumbent_successes']}",
            _ci(r.arm_decision["success_difference"], r.arm_decision["success_ci"]),
            _ci(r.arm_decision["return_difference"], r.arm_decision["return_ci"]),
            r.arm_decision["basis"],
        ]
        for r in decided
    ]
    table = _table(
        ["round", "method", "candidate", "incumbent", "decision", "pairs", "successes",
         "success diff [95% CI]", "return diff [95% CI]", "basis"],
        rows,
    )  # fmt: skip
    return (
        "<h2>The arm decides</h2>"
        + "".join(boxes)
        + '<p class="note">After each promotion the incumbent replays the candidate\'s '
        "evaluation seeds on the stand-in; differences are candidate minus incumbent, "
        "paired by seed, with paired-bootstrap 95% CIs.</p>" + table
    )


def _ci(mean: float, ci) -> str:
    return f"{mean:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def render_report(summary: LoopSummary) -> str:
    records = summary.completed_rounds()
    images = [
        _figure_png(_success_plot(summary)),
        _figure_png(
            _bar_plot(
                summary, lambda r: r.real_episodes_total, "Stand-in episodes used", "episodes"
            )
        ),
        _figure_png(
            _bar_plot(summary, lambda r: r.safety_interventions, "Safety interventions", "count")
        ),
        _figure_png(_loss_plot(summary)),
    ]
    rounds_rows = []
    for record in records:
        cells = [str(record.index), record.method or "-", record.policy_version]
        scores = [record.score(c) for c in CONDITIONS]
        scores += [record.check_score(c) for c in CONDITIONS]
        for score in scores:
            cells.append(
                f"{score.successes}/{score.episodes} ({score.ci_low:.0%}..{score.ci_high:.0%})"
                if score
                else "-"
            )
        cells += [
            ", ".join(f"{k} {v}" for k, v in record.collected.items()) or "-",
            str(record.real_episodes_total),
            f"{record.stand_in_seconds_total / 60:.1f}",
            str(record.safety_interventions),
        ]
        rounds_rows.append(cells)
    gate_rows = [
        [
            str(record.index),
            record.method or record.update.method or "-",
            record.update.version,
            ("promoted" if record.update.promoted else "rejected")
            + (f", then {record.arm_decision['kind']} on the arm" if record.arm_decision else ""),
            "; ".join(
                f"{s['condition']} {s['successes']}/{s['episodes']} "
                f"[{s['ci_low']:.0%}, {s['ci_high']:.0%}] "
                f"vs running {s['baseline_success_rate']:.0%}"
                for s in record.update.screening
            ),
            record.update.reason,
        ]
        for record in records
        if record.update is not None
    ]
    identification_rows = [
        [
            str(r.index),
            ", ".join(f"{k} {v:.3g}" for k, v in r.identification.get("values", {}).items()),
            ", ".join(r.identification.get("unidentifiable", [])) or "none",
            "{:.3f} -> {:.3f}".format(*r.identification.get("fit_error", [0, 0])),
            "{:.3f} -> {:.3f}".format(*r.identification.get("holdout_error", [0, 0])),
            _times_noise(r.identification.get("residual_over_noise")),
            r.identification.get("profile", ""),
        ]
        for r in summary.rounds
        if r.identification
    ]
    diagnosis_rows = [
        [str(r.index), r.diagnosis.get("label", "-"), r.diagnosis.get("summary", "")]
        for r in records
    ]
    config_rows = [[key, str(value)] for key, value in sorted(summary.config.items())]
    stand_in = str(summary.config.get("stand_in_profile", "real_twin"))
    plots = "".join(f'<img alt="plot" src="data:image/png;base64,{png}">' for png in images)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>simreal loop {html.escape(summary.run_id)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; font-size: 13px; text-align: left; }}
img {{ margin: 4px; border: 1px solid #eee; }}
.note {{ color: #555; }}
.lost {{ border: 2px solid #c00; background: #fee; padding: 8px; margin: 8px 0; }}
</style></head><body>
<h1>Fine-tuning loop: {html.escape(summary.run_id)}</h1>
<p class="note">The arm in this run is the <b>stand-in {html.escape(stand_in)}</b>: a
simulated arm with a fixed, hidden dynamics gap, driven through the full ROS 2 graph exactly
as a physical arm would be. It is not a physical robot. Solid lines: the graph's trials
(fresh seeds every round). Dashed: the off-ROS check, the running policy on the stand-in
behind the safety filter, the same seeds every round and never trained on (a check a
physical arm cannot give).</p>
{_arm_section(records)}
<h2>Plots</h2>{plots}
<h2>Rounds</h2>{
        _table(
            [
                "round",
                "method",
                "policy",
                "train (graph)",
                "shifted (graph)",
                "train (off-ROS check)",
                "shifted (off-ROS check)",
                "collected",
                "episodes used",
                "stand-in minutes",
                "safety interventions",
            ],
            rounds_rows,
        )
    }
<h2>Gate decisions</h2>{
        _table(["round", "method", "candidate", "decision", "screening", "reason"], gate_rows)
    }
<h2>Identified dynamics (what screening ran in)</h2>{
        _table(
            [
                "round",
                "identified (factor on nominal; latency in steps)",
                "unidentifiable",
                "fit error nominal -> identified",
                "held-out error",
                "held-out error over noise's (over 5: the model cannot fit the arm)",
                "profile",
            ],
            identification_rows,
        )
        if identification_rows
        else "<p>none: screened in the learner's screen.profile</p>"
    }
<h2>Diagnosis</h2>{_table(["round", "label", "evidence"], diagnosis_rows)}
<h2>Configuration</h2>{_table(["setting", "value"], config_rows)}
</body></html>
"""


def write_report(summary: LoopSummary, path: Path) -> Path:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(render_report(summary), encoding="utf-8")
    temporary.replace(path)
    return path


def _times_noise(value) -> str:
    return "-" if value is None else f"{value:.1f}x"
