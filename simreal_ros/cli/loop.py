"""`simreal loop`: the fine-tuning loop on a stand-in for the arm, through the ROS graph."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import traceback

from simreal_ros.cli.executor_options import add_executor_options, executor_from_args
from simreal_ros.config_schema import describe, from_mapping
from simreal_ros.loop.config import LoopConfig


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "loop",
        help="run fine-tuning rounds on a stand-in for the arm through the graph",
        description=(
            "Round 0 evaluates the base policy zero-shot on the stand-in (train and shifted "
            "conditions); each later round collects episodes aimed at the last diagnosis, "
            "lets the learner fine-tune and screen in sim, evaluates on the stand-in and "
            "diagnoses. Writes runs/<id>/ (config, bags, adapters, summary.json, "
            "report.html). Re-running with the same --run-id resumes. A loop that cannot "
            "go on (a round timeout, a dead node, a learner with no arm data) prints one "
            "line with the cause and exits 1; a refused setting exits 2."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for field in dataclasses.fields(LoopConfig):
        default = field.default
        flag = "--" + field.name.replace("_", "-")
        kind = _boolean if isinstance(default, bool) else type(default)
        kwargs = {"default": default, "help": describe(field)}
        if field.metadata.get("choices"):
            kwargs["choices"] = field.metadata["choices"]
        parser.add_argument(flag, type=kind, **kwargs)
    parser.add_argument("--runs-dir", default="runs", help="where run directories are made")
    parser.add_argument(
        "--run-id", default="", help="run directory name (default: a new timestamped one)"
    )
    add_executor_options(parser)
    parser.set_defaults(func=run)


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"{text!r}: give true or false.")
    return value in ("true", "1", "yes")


def _stopped(run_dir, cause: str) -> int:
    print(f"[simreal loop] stopped: {cause}", file=sys.stderr)
    print(f"[simreal loop] what was recorded is kept in {run_dir.path}", file=sys.stderr)
    return 1


def _stand_in_label(config: LoopConfig) -> str:
    """The stand-in as given, and its profile name where the two differ."""
    name, given = config.stand_in_name(), config.stand_in_profile
    return given if name == given else f"{name} ({given})"


def run(args) -> int:
    from simreal_ros.loop.orchestrator import LoopOrchestrator
    from simreal_ros.loop.state import RunDirectory
    from simreal_ros.loop.stops import LoopStopped
    from simreal_ros.nodes.loop_graph import ros_loop_graph
    from simreal_ros.robot.description import load_robot_description

    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(LoopConfig)}
    config = from_mapping(LoopConfig, values)
    methods = "+".join(config.round_methods())
    run_id = args.run_id or time.strftime(f"{config.task}-{methods}-%Y%m%d-%H%M%S")
    run_dir = RunDirectory(args.runs_dir, run_id)
    print(
        f"[simreal loop] run {run_dir.path} (the arm is the stand-in "
        f"{_stand_in_label(config)}, simulated, never the physical arm)"
    )
    try:
        with executor_from_args(args) as executor:
            orchestrator = LoopOrchestrator(
                config, run_dir, executor=executor, robot=load_robot_description()
            )
            summary = orchestrator.execute(
                lambda method: ros_loop_graph(config, run_dir, method, orchestrator.say)
            )
    except (LoopStopped, TimeoutError, RuntimeError) as error:
        # A round timeout, a dead node, a learner with no arm data: one line, exit 1.
        return _stopped(run_dir, str(error))
    except (ValueError, KeyboardInterrupt):
        raise  # a refused setting (exit 2) or Ctrl-C (130): the command line says so
    except Exception as error:  # anything else is a defect: one line here, the trace on disk
        trace = run_dir.path / "loop-error.txt"
        trace.parent.mkdir(parents=True, exist_ok=True)
        trace.write_text(traceback.format_exc(), encoding="utf-8")
        return _stopped(run_dir, f"{type(error).__name__}: {error} (traceback in {trace})")
    rounds = summary.completed_rounds()
    print(f"[simreal loop] {len(rounds)} round(s) done; report: {run_dir.report_file}")
    first, last = rounds[0], rounds[-1]
    for condition in ("train", "shifted"):
        measures = (
            ("graph trials", first.score(condition), last.score(condition)),
            (
                "off-ROS check (stand-in behind the filter, same seeds)",
                first.check_score(condition),
                last.check_score(condition),
            ),
        )
        for label, a, b in measures:
            if a and b:
                print(
                    f"[simreal loop] {condition}, {label}: {a.successes}/{a.episodes} "
                    f"[{a.ci_low:.0%}, {a.ci_high:.0%}] at round 0 ({first.policy_version}) "
                    f"-> {b.successes}/{b.episodes} [{b.ci_low:.0%}, {b.ci_high:.0%}] at "
                    f"round {last.index} ({last.policy_version})"
                )
    for record in rounds:
        if record.arm_decision:
            print(f"[simreal loop] round {record.index} ({record.method}): the arm "
                  f"{record.arm_decision['kind']}: {record.arm_decision['reason']}")  # fmt: skip
    if first.policy_version == last.policy_version:
        print(
            "[simreal loop] no candidate was promoted: the difference between rounds is "
            "evaluation noise of the same policy, not learning."
        )
    return 0
