"""One flag for each meaning of "profile".

``--profile`` alone meant both the graph (sim or real) and the sim's dynamics. Every command
now says ``--graph sim|real`` for the one and ``--dynamics-profile NAME|PATH`` for the other;
``--profile`` is still parsed, only to be refused by ``cli.main`` with this hint.
"""

from __future__ import annotations

import argparse

OLD_PROFILE_HINT = (
    "--profile is ambiguous and no longer taken: give the graph with --graph sim|real, and "
    "the sim's dynamics with --dynamics-profile NAME|PATH (nominal, randomized, real_twin)."
)


def add_old_profile_flag(parser) -> None:
    """The old spelling, hidden from --help, kept so that it is refused with the hint."""
    parser.add_argument("--profile", dest="old_profile", default=None, help=argparse.SUPPRESS)


def add_dynamics_profile_option(parser, default: str, help: str, dest: str = "profile") -> None:
    parser.add_argument("--dynamics-profile", dest=dest, default=default, help=help)
    add_old_profile_flag(parser)


def refuse_old_profile(args) -> None:
    if getattr(args, "old_profile", None) is not None:
        raise ValueError(OLD_PROFILE_HINT)
