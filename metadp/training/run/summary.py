"""What ``metadp train`` prints after a meta-learning run: steps, sampling, the engine (processes, Flower),
every unit's epsilon with its direction, and the evaluation."""

from __future__ import annotations

from metadp.report import format_upper

__all__ = ["print_plan_run", "print_flag_run", "plan_promise"]


def print_plan_run(args, plan, alg, report: dict) -> None:
    """A plan run's summary: steps, sampling, the engine's record, every unit's epsilon with its direction."""
    print(f"{args.algorithm} ran the plan {plan.name!r} ({args.plan}): {report['steps_done']:,} of {plan.steps:,} "
          f"steps; {plan.sampling.text('task')}")
    if args.engine == "flower":
        fed = report["federated"]
        print(f"engine flower ({fed['mode_means']}): {fed['clients']:,} clients, one task each; "
              f"{fed['updates_dropped']:,} of {fed['updates_asked']:,} asked updates dropped (counted as zero updates)")
    _print_processes(report)
    if not alg.private:
        print("non-private: no privacy guarantee (the plan's sampling and steps, without clipping or noise)")
        return
    print(f"  {report['view']} [the plan's unit]: epsilon <= {format_upper(float(report['epsilon']))} (upper bound, "
          f"{report['accountant'].upper()}) at delta = {report['delta']:g}, {report['relation'].replace('_', '/')} "
          "neighbours")
    for other in report["other_units"]:
        print(f"  {other['view']}: epsilon <= {format_upper(float(other['epsilon']))} (upper bound, "
              f"{other['accountant'].upper()}) at delta = {report['delta']:g}, "
              f"{other['relation'].replace('_', '/')} neighbours")
    source = (f"`metadp plan {args.plan}`" if args.epsilon is None else
              "`metadp plan` of the calibrated plan" + (f" ({args.save_plan})" if args.save_plan else ""))
    print(plan_promise(report, source))


def plan_promise(report, source: str) -> str:
    """What a plan run's numbers are: ``source``'s (``metadp plan FILE``) for the steps run, or, where a resumed
    run re-released the steps after its last checkpoint, how many releases were charged for how many steps."""
    primary = next((v for v in report.get("views", []) if v.get("unit") == report.get("unit")), None)
    charged = primary["charges"] if primary is not None and primary.get("charged_per") == "step" else None
    if charged is not None and charged > report["steps_done"]:
        return (f"  {charged:,} releases charged for {report['steps_done']:,} steps: the run was resumed after an "
                f"interruption, and the steps after its last checkpoint were run again and charged again (every "
                f"release is on the ledger, so the budget is safe); the epsilon above counts all {charged:,} "
                f"({source} for {charged:,} steps), and training stopped there")
    return f"  the same numbers as {source} for the steps run; every release is on each unit's ledger"


def print_flag_run(args, result, config, private: bool, score, out) -> None:
    """A flag run's summary: steps, sampling, every unit's epsilon (with its direction) and the evaluation."""
    sampling = result.report["sampling_run"]
    print(f"{args.algorithm}: {len(result.losses):,} steps (last within budget: {result.last_step:,}); tasks sampled "
          f"{result.report['sampling']['scheme']} from a fixed pool of {sampling['pool']:,} (expected "
          f"{sampling['expected_batch']:.4g} a step)")
    _print_processes(result.report)
    if not private:
        print("non-private: no privacy guarantee")
    for view in result.report["views"]:
        budget = " [budget]" if view["view"] == config.budget_unit else ""
        if view["epsilon"] is None:
            print(f"  {view['view']}{budget}: no guarantee ({view['note']})")
        else:
            print(f"  {view['view']}{budget}: epsilon <= {format_upper(view['epsilon'])} (upper bound, "
                  f"{view['accountant'].upper()}) at delta = "
                  f"{args.delta:g}, {view['relation'].replace('_', '/')} neighbours, {view['charged_per']} charges; "
                  f"against {view['adversary']}; {view['note']}")
    print(f"evaluation: {score}; files in {out}/")


def _print_processes(report: dict) -> None:
    if report.get("processes"):
        print(f"{report['processes']} processes (torch.distributed, {report['backend']}): each step's tasks split "
              "across them, the noise drawn once by rank 0; the same release as one process")
