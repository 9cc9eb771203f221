"""The best available model of the arm for a learner session: a profile identified from
real bags (or configured), where candidates are screened and method sysid trains."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simreal_ros.atomic_files import write_json_atomic
from simreal_ros.learner.config import LearnerConfig

log = logging.getLogger("simreal_ros.learner")


class IdentifiedDynamics:
    """The identified profile (a profile YAML; empty: none yet) and how it was obtained."""

    def __init__(self, robot, profile: str = "") -> None:
        self.robot = robot  # the arm whose bags are identified from (a RobotDescription)
        self.profile = profile
        self.identification: dict[str, Any] = {}

    def screening_profile(self, config: LearnerConfig) -> str:
        """The identified profile when there is one, else ``screen.profile`` (randomised by
        default)."""
        return self.profile or config.screen.profile

    def identify(
        self, config: LearnerConfig, bags: Sequence[str | Path], round_: int
    ) -> str | None:
        """System identification from the newest real bags before round ``round_ + 1``; the
        profile, or None (and the reason in ``identification``) when they cannot be
        identified from."""
        from simreal_ros.sysid import FitSettings, SysidInputError, identify_bags
        from simreal_ros.sysid.output import KEPT_PREVIOUS, identification_summary

        cfg = config
        if cfg.sysid.profile:
            return cfg.sysid.profile
        chosen = [str(b) for b in bags][-cfg.sysid.max_episodes :]
        # Named by time: a learner restarted by the loop counts its rounds from 1 again.
        out = (
            Path(cfg.store_root) / "sysid" / f"{time.strftime('%Y%m%d-%H%M%S')}-round{round_ + 1}"
        )
        settings = FitSettings(
            restarts=cfg.sysid.restarts,
            evaluations_per_restart=cfg.sysid.evaluations,
            evaluations_resample=max(20, cfg.sysid.evaluations // 2),
            threads=cfg.screen.workers,
            seed=cfg.seed + round_,
        )
        started = time.time()
        try:
            if len(chosen) < 2:
                raise SysidInputError(f"{len(chosen)} real bags; identification needs 2.")
            result, profile = identify_bags(
                chosen,
                out,
                cfg.task,
                holdout=1 if len(chosen) >= 4 else 0,
                settings=settings,
                robot=self.robot,
            )
        except (SysidInputError, ValueError) as error:
            fallback = self.screening_profile(cfg)
            self.identification = {"error": str(error), "profile": fallback}
            log.warning("identification failed, screening in %s: %s", fallback, error)
            return None
        summary = identification_summary(result.to_dict(), str(profile))
        if not summary["values"] and not summary["bounded"] and self.profile:
            # Finding nothing is a failure of this fit, not evidence of nominal dynamics:
            # the earlier profile, identified from part of the same bags, stays the best
            # model (an adaptation in the prior undid a good round on the stand-in).
            self.identification = summary | {"kept_previous": self.profile}
            write_json_atomic(out / KEPT_PREVIOUS, {"kept_previous": self.profile})
            log.warning("identification from %d bags gave no value; keeping %s",
                        len(chosen), self.profile)  # fmt: skip
            return self.profile
        self.profile = str(profile)
        self.identification = summary
        log.info("identified dynamics from %d bags in %.0f s: %s", len(chosen),
                 time.time() - started, profile)  # fmt: skip
        return str(profile)
