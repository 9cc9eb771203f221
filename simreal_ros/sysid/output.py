"""What an identification writes: a dynamics profile, the numbers, and a plot of the fit.

``write_result(result, out_dir, ...)`` writes, only after the fit succeeded:

- ``profile.yaml``: a dynamics profile usable wherever one is (``--dynamics-profile PATH``, the sim
  bridge's ``profile``, the learner's ``screen.profile``). Identified parameters are fixed
  factors (``scale``) or values (``set``). One the data bound but do not fix (its 95% range
  wider than the limit) is drawn per reset from that range, and one whose best value moves
  with a drawn partner follows that partner's draw (``tied``); any other unidentifiable one
  keeps the prior's range (the randomised profile's) or, without one, its nominal value:
  it is not guessed. ``stand_in: false``: an identified model is not a stand-in.
- ``sysid.json``: every estimate with its uncertainty and identifiability, the noise, and
  the fit error before and after on the fit and held-out episodes.
- ``fit.png``: replayed trajectories (nominal, identified) against the recording.
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml

from simreal_ros.atomic_files import write_text_atomic
from simreal_ros.sim.profiles import load_profile
from simreal_ros.sysid.parameters import LATENCY, FitParameter, ParameterEstimate, SysidResult
from simreal_ros.sysid.simulate import JOINT_SCALE, ReplaySimulator

PRIOR_PROFILE = "randomized"


def profile_document(result: SysidResult, name: str, prior: str = PRIOR_PROFILE) -> dict:
    prior_profile = load_profile(prior)
    scale: dict[str, object] = {}
    values: dict[str, object] = {}
    randomized = False
    for p in result.parameters:
        if p.identifiable:
            if p.pattern == LATENCY:
                values[LATENCY] = round(p.value)
            else:
                for key in p.pattern.split("|"):  # a group of joints: each by name
                    scale[key] = round(float(p.value), 6)
            continue
        if p.bounded is not None:  # the range the data bound, not the prior's
            low, high = p.bounded
            if p.pattern == LATENCY:
                values[LATENCY] = [max(0, round(low)), round(high)]
            else:
                for key in p.pattern.split("|"):
                    scale[key] = [round(float(low), 6), round(float(high), 6)]
            randomized = True
            continue
        entry = prior_entry(prior_profile, p.pattern, p.names)
        if entry is None:
            continue
        randomized = randomized or isinstance(entry, tuple)
        entry = list(entry) if isinstance(entry, tuple) else entry
        if p.pattern == LATENCY:
            values[LATENCY] = entry
        else:
            for key in p.pattern.split("|"):
                scale[key] = entry
    if np.isfinite(result.obs_noise):
        values["obs_noise"] = round(float(result.obs_noise), 6)
    tied = {}
    for p in result.parameters:
        partner = (p.follows or {}).get("partner", "").split("|")[0]
        if partner in scale or partner in values:  # drawn: the value follows its draw
            points = [[_rounded(x), _rounded(y)] for x, y in p.follows["points"]]
            tied.update({key: {"with": partner, "points": points}
                         for key in p.pattern.split("|")})  # fmt: skip
    return {
        "profile": name,
        "stand_in": False,
        "randomize_each_reset": randomized,
        "scale": scale,
        "set": values,
        **({"tied": tied} if tied else {}),
        # Read by sim adaptation (randomisation around the identified values); the profile
        # loader ignores both. docs/sysid.md describes the fields.
        "spread": {
            pattern: {k: _rounded(v) for k, v in entry.items()}
            for pattern, entry in result.spreads().items()
        },
        "unidentifiable": result.unidentifiable_reasons(),
    }


def prior_entry(prior_profile, pattern: str, names: Sequence[str]):
    """The prior profile's entry for a fit parameter: a (low, high) range, a fixed value, or
    None. A joint of a prior's group (``gain.*``) takes the group's."""
    if pattern == LATENCY:
        return prior_profile.set.get(LATENCY)
    entry = prior_profile.scale.get(pattern)
    if entry is None:
        entry = next(
            (v for k, v in prior_profile.scale.items()
             if all(fnmatch.fnmatchcase(n, k) for n in names)),
            None,
        )  # fmt: skip
    if entry is None and len(names) > 1:  # a group whose names the prior draws alike
        each = [prior_entry(prior_profile, n, [n]) for n in names]
        if each[0] is not None and all(e == each[0] for e in each):
            entry = each[0]
    return entry


def prior_ranges(
    parameters: Sequence[FitParameter], prior: str = PRIOR_PROFILE
) -> dict[str, tuple[float, float]]:
    """Per fit pattern, the range the prior profile draws it from (a factor, or latency
    steps), where it draws one: what the identified profile gives a parameter it cannot
    fix, and so what a value must hold across (``identify``'s ``prior``)."""
    prior_profile = load_profile(prior)
    out = {}
    for p in parameters:
        entry = prior_entry(prior_profile, p.pattern, p.pattern.split("|"))
        if isinstance(entry, tuple):
            out[p.pattern] = (float(entry[0]), float(entry[1]))
    return out


def _rounded(value):
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [round(float(v), 6) for v in value]
    return value


def _header(result: SysidResult, prior: str) -> str:
    lines = [
        "# Identified by `simreal sysid` from recorded episodes "
        f"({time.strftime('%Y-%m-%d %H:%M')}).",
        f"# Fit on {len(result.fit_sources)} episodes, {len(result.holdout_sources)} held out;"
        " trajectory error (see sysid.json):",
    ]
    for split in ("fit", "holdout"):
        b, a = result.before[split], result.after[split]
        if b.episodes:
            lines.append(
                f"#   {split}: {b.loss:.3f} nominal -> {a.loss:.3f} identified "
                f"(joint RMS {b.joint_rms * 1e3:.1f} -> {a.joint_rms * 1e3:.1f} mrad)"
            )
    ranged = [p.pattern for p in result.parameters if p.bounded is not None]
    if ranged:
        lines.append(
            "# Bounded, not fixed, by these episodes (drawn from the range the data allow): "
            + ", ".join(ranged)
        )
    gone = [p for p in result.unidentifiable() if p not in ranged]
    if gone:
        lines.append(
            f"# Unidentifiable from these episodes (kept at the {prior} profile's range, or "
            f"nominal): {', '.join(gone)}"
        )
    return "\n".join(lines) + "\n"


def write_result(
    result: SysidResult,
    out_dir: Path | str,
    simulator: ReplaySimulator | None = None,
    name: str = "identified",
    prior: str = PRIOR_PROFILE,
) -> Path:
    """Write profile.yaml, sysid.json and (with ``simulator``) fit.png; returns the profile."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    document = profile_document(result, name, prior)
    profile = out / "profile.yaml"
    write_text_atomic(profile, _header(result, prior) + yaml.safe_dump(document, sort_keys=False))
    load_profile(str(profile))  # what was written must load as a profile
    report = result.to_dict() | {"profile": document, "profile_path": str(profile)}
    write_text_atomic(out / "sysid.json", json.dumps(report, indent=2, default=float))
    if simulator is not None:
        plot_fit(result, simulator, out / "fit.png")
    return profile


def plot_fit(result: SysidResult, simulator: ReplaySimulator, path: Path) -> None:
    """Recorded vs replayed (nominal, identified) for one fit and one held-out episode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sources = [e.source for e in simulator.episodes]
    shown = [sources.index(result.fit_sources[0])]
    if result.holdout_sources:
        shown.append(sources.index(result.holdout_sources[0]))
    identified = result.values()
    fig, axes = plt.subplots(len(shown), 3, figsize=(13, 3.4 * len(shown)), squeeze=False)
    for row, index in enumerate(shown):
        prepared = simulator._prepared[index]
        episode = prepared.episode
        rows = prepared.measured_rows
        t = episode.state_times[rows]
        (qn, pn), (qi, pi) = (simulator.trajectories([v], index) for v in ({}, identified))
        moving = np.argsort(-np.ptp(episode.joint_positions, axis=0))[:2]
        label = "held out" if index != shown[0] else "fit"
        for col, j in enumerate(moving):
            ax = axes[row, col]
            ax.plot(t, episode.joint_positions[rows, j], "k.", ms=2, label="recorded")
            ax.plot(t, qn[0, :, j], "C3-", label="nominal replay")
            ax.plot(t, qi[0, :, j], "C0-", label="identified replay")
            ax.set_title(f"{label}: {simulator.robot.joint_names[j]}")
            ax.set_xlabel("s")
            ax.set_ylabel("rad")
        ax = axes[row, 2]
        ax.plot(episode.object_positions[rows, 0], episode.object_positions[rows, 1], "k.",
                ms=2, label="recorded")  # fmt: skip
        ax.plot(pn[0, :, 0], pn[0, :, 1], "C3-", label="nominal replay")
        ax.plot(pi[0, :, 0], pi[0, :, 1], "C0-", label="identified replay")
        ax.set_title(f"{label}: cube x-y")
        ax.set_xlabel("x [m]")
        ax.set_ylabel("y [m]")
        ax.set_aspect("equal", adjustable="datalim")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(
        f"system identification: error {result.before['fit'].loss:.3f} -> "
        f"{result.after['fit'].loss:.3f} (fit), {len(result.unidentifiable())} unidentifiable"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# Beside a sysid.json whose identification gave no value: the profile the learner kept.
KEPT_PREVIOUS = "kept_previous.json"


def identification_summary(report: dict, profile: str) -> dict:
    """What the learner's metadata, the loop's summary and its report keep of one
    identification; ``report`` is ``SysidResult.to_dict()`` or a written sysid.json."""
    parameters = report.get("parameters", [])
    return {
        "profile": str(profile),
        "values": {p["pattern"]: p["value"] for p in parameters if p["identifiable"]},
        "unidentifiable": [p["pattern"] for p in parameters if not p["identifiable"]],
        "bounded": {p["pattern"]: p["bounded"] for p in parameters if p.get("bounded")},
        "spread": {p["pattern"]: p.get("spread") for p in parameters if p["identifiable"]},
        "model": report.get("model", ""),
        "obs_noise": report.get("obs_noise"),
        "episodes": len(report.get("fit_sources", [])) + len(report.get("holdout_sources", [])),
        "fit_error": [report["before"]["fit"]["loss"], report["after"]["fit"]["loss"]],
        "holdout_error": [
            report["before"]["holdout"]["loss"],
            report["after"]["holdout"]["loss"],
        ],
        "seconds": report.get("seconds", 0.0),
        "residual_over_noise": residual_over_noise(
            report["after"]["holdout"]["loss"], report.get("obs_noise")
        ),
    }


# The smallest measurement noise the residual assumes (rad): the quantisation of a 14-bit
# joint encoder, 2 pi / 2^14 / sqrt(12). Noise-free measurements (a simulator's) would
# otherwise make any fit, however close, read thousands of times what noise leaves.
JOINT_NOISE_FLOOR = 2 * np.pi / 2**14 / np.sqrt(12)


def residual_over_noise(holdout_loss: float, obs_noise: float | None) -> float | None:
    """The identified model's held-out replay error over what measurement noise alone
    leaves (None without a noise estimate). A replay restarts from a noisy recorded state
    and is scored on noisy measurements, so an exact model leaves about twice the noise
    variance, in the loss's units (``JOINT_SCALE``): a model in the arm's family ends near
    1, one that cannot express the arm far above it. The noise is taken as at least
    ``JOINT_NOISE_FLOOR``."""
    if obs_noise is None or not np.isfinite(obs_noise) or obs_noise < 0:
        return None
    noise_only = 2.0 * (max(float(obs_noise), JOINT_NOISE_FLOOR) / JOINT_SCALE) ** 2
    return float(holdout_loss) / noise_only


def estimate_error(p: ParameterEstimate, truth: float) -> float:
    """``p``'s value against ``truth``: the difference in steps for the latency, else the
    relative error as the simulation sees it (``effective``: a friction below the one that
    decides its contacts simulates as that one)."""
    if p.pattern == LATENCY:
        return p.value - truth
    return p.effective(p.value) / p.effective(truth) - 1


def range_holds(p: ParameterEstimate, truth: float) -> bool:
    """Whether ``p``'s range holds ``truth`` as the simulation sees it (``effective``: a
    friction below the one that decides its contacts simulates as that one)."""
    low, high = p.bounded
    return p.effective(low) - 1e-9 <= p.effective(truth) <= p.effective(high) + 1e-9


def format_result(result: SysidResult, hidden: dict[str, float] | None = None) -> str:
    """The estimates as a table; with ``hidden`` (a stand-in's true values), their errors."""
    lines = []
    for row in result.model_selection:
        lines.append(
            f"model {row['model']:<12} {row['parameters']:>2} parameters: fit error "
            f"{row['fit_error']:.4f}, held-out {row['holdout_error']:.4f}, score "
            + ("-" if row["score"] is None else f"{row['score']:.3f}")
            + ("  <- chosen" if row["chosen"] else "")
        )
    lines.append(
        f"{'parameter':<20} {'estimate':>10} {'spread':>8}  identifiable"
        + ("   hidden   error" if hidden else "")
    )
    for p in result.parameters:
        shown = "-" if p.value is None else f"{p.value:.4g}"
        if p.bounded is not None:
            shown = f"{p.bounded[0]:.3g}..{p.bounded[1]:.3g}"
        spread = "-" if p.spread is None else f"{p.spread:.2g}"
        spread += "" if p.pattern == LATENCY else " log"
        name = p.pattern if len(p.pattern) <= 20 else p.pattern[:17] + "..."
        verdict = "yes" if p.identifiable else ("range" if p.bounded else "NO")
        row = f"{name:<20} {shown:>10} {spread:>8}  {verdict}"
        if hidden is not None:
            truth = hidden.get(p.pattern)
            if truth is not None and p.value is not None:
                error = estimate_error(p, truth)
                unit = " steps" if p.pattern == LATENCY else ""
                row += (
                    f"   {truth:<7.4g}  {error:+.1%}"
                    if not unit
                    else (f"   {truth:<7.4g}  {error:+.0f}{unit}")
                )
            elif truth is not None and p.bounded is not None:
                held = range_holds(p, truth)
                row += f"   {truth:<7.4g}  ({'in' if held else 'outside'} the range)"
            elif truth is not None:
                row += f"   {truth:<7.4g}  (not identified)"
        if not p.identifiable:
            row += f"\n{'':<22}{p.reason}"
        lines.append(row)
    noise = f"obs_noise {result.obs_noise:.5f} (95% CI {result.obs_noise_ci[0]:.5f}.."
    noise += f"{result.obs_noise_ci[1]:.5f})"
    if hidden and "obs_noise" in hidden:
        noise += f", hidden {hidden['obs_noise']:.5f}"
    lines.append(noise)
    for split in ("fit", "holdout"):
        b, a = result.before[split], result.after[split]
        if b.episodes:
            lines.append(
                f"{split} ({b.episodes} episodes): error {b.loss:.4f} -> {a.loss:.4f}; joint "
                f"RMS {b.joint_rms * 1e3:.2f} -> {a.joint_rms * 1e3:.2f} mrad; object RMS "
                f"{b.object_rms * 1e3:.2f} -> {a.object_rms * 1e3:.2f} mm"
            )
    for split in ("fit", "holdout"):
        b, a = result.whole_before.get(split), result.whole_after.get(split)
        if b is not None and b.episodes:
            lines.append(
                f"{split}, whole-episode replay (the check): error {b.loss:.4f} -> {a.loss:.4f};"
                f" object RMS {b.object_rms * 1e3:.2f} -> {a.object_rms * 1e3:.2f} mm"
            )
    for pair in result.correlations:
        lines.append(f"correlation {pair['a']} ~ {pair['b']}: {pair['correlation']:+.2f}")
    lines.append(f"{result.evaluations} replays of the fit episodes, {result.seconds:.0f} s")
    return "\n".join(lines)


def hidden_factors(profile: str, nominal: dict[str, float], patterns) -> dict[str, float]:
    """A fixed profile's values as the fit's factors (for reporting against a stand-in)."""
    values = load_profile(profile).sample(nominal, np.random.default_rng(0))
    out = {}
    for pattern in patterns:
        if pattern == LATENCY:
            out[pattern] = float(values.get(LATENCY, nominal.get(LATENCY, 0.0)))
            continue
        alternatives = pattern.split("|")
        names = [n for n in nominal if any(fnmatch.fnmatchcase(n, a) for a in alternatives)]
        if len(names) > 1 and all(n.startswith("friction.") for n in names):
            # A group of frictions is the contact between them, which takes the larger.
            truth = max(values.get(n, nominal[n]) for n in names)
            out[pattern] = float(truth / max(nominal[n] for n in names))
            continue
        factors = [values.get(n, nominal[n]) / nominal[n] for n in names if nominal[n]]
        if factors:
            out[pattern] = float(np.mean(factors))
    if "obs_noise" in values:
        out["obs_noise"] = float(values["obs_noise"])
    return out
