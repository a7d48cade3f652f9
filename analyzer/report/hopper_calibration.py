"""What napkin calibrate --kernel hopper writes: the profile with the Hopper kernel's fit (a new calibrated
profile, or an existing one of the same GPU with its `hopper` entry replaced) and the validation report."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from analyzer.calibrate.hopper import BIAS, BIAS_ROW, FP8_TENSOR, Result, hopper_fit
from analyzer.calibrate.hopper_variants import Variants, counted
from analyzer.calibrate.ranges import at_bounds_text
from analyzer.calibrate.validate import HELD_OUT_SHARE
from analyzer.common.atomic import write_files
from analyzer.common.errors import NapkinError
from analyzer.common.yamlio import load_file

MEANING = {
    "tensor_efficiency": "achieved fraction of the tensor cores' datasheet rate inside wgmma",
    "softmax_overhead": "o of Section 6.3: the threads' work beyond Table 3's, per clock of it (paper: 0.66)",
    "l2_efficiency": "achieved fraction of the L2 bandwidth the chunks of K and V are read at",
    "chunk_overhead_s": "seconds per streamed chunk beyond its period and loads (barrier waits)",
    "prologue_chunks": "chunk times a tile adds for its first QK^T and last PV, which run alone (paper: 1)",
    "tile_overhead_s": "seconds a tile adds beyond its chunks (query load, output store, barrier set-up)",
    "consumer_overhead_s": "seconds a tile adds per consumer warpgroup (its epilogue: normalise, stage, store)",
    "launch_overhead_s": "seconds per kernel launch",
    "lone_overlap": "where one consumer warpgroup with no overlap scheduled runs: serial (0) to intra (1)",
    "mask_overhead": "chunk times a causal tile's masked step adds (its first chunk and those on the diagonal)",
    "overlap_softness": "1/p of the p-norm the tensor cores' and threads' work combine by (paper: 0, the longer alone)",
    "persistent_hidden": "share of a tile's prologue and overhead the persistent schedule runs under the tile before",
    "persistent_slowdown": "what a streamed chunk costs the persistent schedules more, as a fraction of its time",
    "prefetch_hidden": "share of a tile's prologue and overhead the prefetch schedule runs under the tile before",
}
REGENERATE = "#   "            # the header's lines that say how the file was made


def kept_fit(existing: Path | None, base: str, key: str = "hopper",
             flag: str = "--kernel hopper") -> tuple[dict, list[str]] | None:
    """The fit `key` (the Hopper kernel's, or the contraction kernel's) an existing calibrated profile of
    `base` holds, with the header lines that say how it was made (those naming `flag`); None where there
    is no such file or fit. The portable kernels' calibrate keeps it, as each fit keeps the others': each
    command replaces its own part of the profile."""
    if existing is None or not existing.is_file():
        return None
    data = load_file(existing)
    if not isinstance(data, dict) or data.get("extends") != base:
        return None
    fit = (data.get("calibration") or {}).get(key)
    if not isinstance(fit, dict):
        return None
    lines = [line for line in existing.read_text().splitlines()
             if line.startswith(REGENERATE) and flag in line]
    return fit, lines


def profile_yaml(r: Result, command: str, existing: Path | None) -> str:
    """The calibrated profile: `existing` (a calibrated profile of the same GPU) with its Hopper fit
    replaced, or a new one that extends the datasheet profile with the fit alone."""
    return fit_profile_yaml(r.base, "hopper", "the Hopper kernel's model", hopper_fit(r, command).model_dump(
        exclude_none=True), command, existing)


def fit_profile_yaml(base, key: str, model: str, fit: dict, command: str, existing: Path | None) -> str:
    """A calibrated profile with one kernel's fit (`key`: hopper, contraction; `model` names it): `existing`
    (a calibrated profile of `base`'s GPU) with that entry and the command line that made it replaced, or a
    new profile that extends `base` with the fit alone."""
    flag = f"--kernel {key}"
    if existing is not None and existing.is_file():
        data = load_file(existing)
        if not isinstance(data, dict) or data.get("extends") != base.name or "calibration" not in data:
            raise NapkinError(f"{existing} is not a calibrated profile of {base.name}", field="--output",
                              hint=f"write a new file, or name one that extends {base.name}")
        data["calibration"][key] = fit
        head = [line for line in existing.read_text().splitlines() if line.startswith("#")]
        mine = [i for i, line in enumerate(head) if line.startswith(REGENERATE) and flag in line]
        if mine:        # the command's own line, where it was (the portable fit's writer keeps the order)
            head[mine[0]] = REGENERATE + command
            head = [line for i, line in enumerate(head) if i not in mine[1:]]
        else:
            at = max((i for i, line in enumerate(head) if line.startswith(REGENERATE)), default=len(head) - 1)
            head.insert(at + 1, REGENERATE + command)
    else:
        name = existing.stem if existing is not None else f"{base.name}-calibrated"   # found by file name
        data = {"name": name, "extends": base.name,
                "description": f"{base.description}, {model} fitted to measurements",
                "calibration": {"source": f"{model} alone (calibration.{key}); the portable kernels' parameters "
                                          "are not fitted on this GPU: the datasheet's",
                                key: fit}}
        head = [f"# {data['description']}.", "# Generated by napkin calibrate; do not edit. Regenerate with",
                REGENERATE + command,
                "# Each parameter names a stated assumption of the model (docs/model.md) with its fitted value",
                "# and one standard error; the report of the command above shows how well it predicts."]
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False, width=100)


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f} %"


def bounds_paragraph(at_bounds: str) -> list[str]:
    """The report's words on the parameters a fit left at a bound of their range (ranges.at_bounds_text);
    none for none."""
    if not at_bounds:
        return []
    return ["", (f"**At a bound of its range:** {at_bounds}. The fit stopped there (least_squares' active "
                 "constraint): the recording would take it further than its meaning allows, so the value is "
                 "that limit, not a measurement of what it stands for.")]


def errors_text(e) -> str:
    """Median and 90th percentile of |predicted / measured - 1| over e.count records, for a terminal."""
    return f"median {_pct(e.median)}, 90th percentile {_pct(e.p90)} ({e.count} records)"


def summary(r: Result) -> list[str]:
    """What napkin calibrate --kernel hopper prints of the fit's quality: its held-out errors, and the
    fit carried to the other GPU's recording."""
    held = r.errors["calibrated"]
    lines = ["held out of the fit, calibrated model: " + "; ".join(
        f"{name} {errors_text(held[key])}" for key, name in
        (("held-out configs", "configurations"), ("held-out size", "size"), ("beyond", "beyond the grid"))
        if key in held)]
    if r.across:
        lines.append(f"carried to {r.other}: {errors_text(r.across['all'])}")
    at = at_bounds_text(r.fitted.at_bounds, {n: getattr(r.fitted.params, n) for n in r.fitted.at_bounds})
    if at:
        lines.append(f"at a bound of its range (a limit, not a measurement): {at}")
    if (v := r.variants) is not None:
        for model in v.errors:
            e = v.errors[model]["all variants"]
            lines.append(f"variants, {model}: " + "; ".join(f"{key} {errors_text(e[key])}"
                                                          for key in ("held-out size", "held-out configs") if key in e))
        at = at_bounds_text(v.at_bounds, {n: v.value(n) for n in v.at_bounds})
        if at:
            lines.append(f"variants at a bound of their range (a limit, not a measurement): {at}")
    return lines


def variants_markdown(v: Variants, base_name: str) -> list[str]:
    """The report's section on the score ops' costs: the fitted values against the counted ones, and
    each diagram's errors for the model carried from softmax attention and the model with the fit."""
    out = ["", "## The variants: what each op of a chain of scores costs", "",
           f"Fitted on {v.source} ({v.recording.meta.get('command', '?')}, {v.recording.meta.get('date', '?')}): "
           f"{v.training} training records of the diagrams whose scores carry an op beyond the softmax, with the "
           "softmax parameters above held fixed; held out as above (one sequence length, one configuration in "
           f"{HELD_OUT_SHARE} by a hash of it and its diagram). The softmax diagrams of the same run move no "
           "parameter here: their rows show the softmax fit carried to that run.", "",
           "| parameter | fitted | ± | as counted | meaning |", "|---|---|---|---|---|"]
    for name, error in v.uncertainty.items():
        shown = f"{error:.2g}" if math.isfinite(error) else "undetermined (no record moves it)"
        if name == BIAS:
            out.append(f"| {name} | {v.value(name):.3g} | {shown} | 1 | achieved fraction of {base_name}'s HBM "
                       "bandwidth an additive bias's bytes are read at (fitted with its rows' term below: above 1, "
                       "the rows carry more of the cost than the bytes) |")
        elif name == BIAS_ROW:
            out.append(f"| {name} | {v.value(name):.3g} | {shown} | 0 | SM clocks a block's copy engine spends a row "
                       "of a bias tile beyond its bytes (a TMA box is a request a row) |")
        elif name == FP8_TENSOR:
            out.append(f"| {name} | {v.value(name):.3g} | {shown} | 1 | FP8 wgmma's achieved fraction of the FP8 "
                       "tensor rate, as a share of tensor_efficiency's of the 16-bit one |")
        else:
            out.append(f"| score_clocks[{name}] | {v.value(name):.4g} | {shown} | {counted(name, v.profile):.4g} | "
                       f"SM clocks a score the {name} op costs the threads |")
    out += bounds_paragraph(at_bounds_text(v.at_bounds, {n: v.value(n) for n in v.at_bounds}))
    out += ["", "| diagram | records | carried from softmax: median | with the fit: median | 90th percentile | worst |",
            "|---|---|---|---|---|---|"]
    carried, fitted = v.errors["carried from softmax"], v.errors["calibrated"]
    order = ("train", "held-out configs", "held-out size", "softmax")
    for diagram, groups in fitted.items():
        for group, e in sorted(groups.items(), key=lambda ge: order.index(ge[0])):
            c = carried[diagram][group]
            out.append(f"| {diagram} | {group} ({e.count}) | {_pct(c.median)} | {_pct(e.median)} | {_pct(e.p90)} | "
                       f"{_pct(e.worst)} |")
    for model, picked in v.choices.items():
        regrets = sorted(c.regret for c in picked)
        within = sum(x <= 0.05 for x in regrets)
        worst = max(picked, key=lambda c: c.regret)
        out += ["", f"{model}: the model's choice within 5 % of the best measured at {within} of {len(regrets)} "
                    f"shapes; median regret {_pct(regrets[len(regrets) // 2])}, worst {_pct(regrets[-1])} "
                    f"({worst.label})."]
    return out


def report_markdown(r: Result, command: str) -> str:
    f = r.fitted
    meta = r.recording.meta
    out = [f"# The Hopper kernel's model on {meta.get('gpu', r.base.name)}", "",
           f"`{command}`: {len(r.records)} measured configurations of {r.source} "
           f"({meta.get('command', '?')}, {meta.get('date', '?')}), timed by CUDA graph replays"
           + (f"; {r.refused} more measured configurations the legality rule now refuses are left out"
              if r.refused else "")
           + (f"; {r.unranked} records of the prefetch schedule under a causal mask, which the model does not "
              "rank there (analyzer.config.hopper_params.UNMASKED_ONLY), are left out" if r.unranked else "") + ".",
           "The fit: least squares on log(predicted / measured) with a Huber loss (scipy.optimize.least_squares), "
           "each parameter bounded to its meaning; uncertainties are one standard error from the fit's Jacobian. "
           "Trained on the FlashAttention-3 grid less one sequence length and one configuration in "
           f"{HELD_OUT_SHARE} (by a hash of it), and on real models' short shapes (`real model: `) less those "
           "configurations; held out: those configurations, that length, and every other shape beyond the "
           "grid.", "",
           "| parameter | fitted | ± | meaning |", "|---|---|---|---|"]
    for name, meaning in MEANING.items():
        if name not in f.uncertainty:       # not fitted: the recording runs no configuration it describes
            out.append(f"| {name} | - | not fitted (no record runs it) | {meaning} |")
            continue
        error = f.uncertainty[name]
        shown = f"{error:.2g}" if math.isfinite(error) else "undetermined (no record moves it)"
        out.append(f"| {name} | {getattr(f.params, name):.4g} | {shown} | {meaning} |")
    out += bounds_paragraph(at_bounds_text(f.at_bounds, {n: getattr(f.params, n) for n in f.at_bounds}))
    out += ["", "## Errors |predicted / measured - 1|", "",
            "| records | model | count | median | 90th percentile | worst |", "|---|---|---|---|---|---|"]
    for model, groups in r.errors.items():
        for group, e in groups.items():
            out.append(f"| {group} | {model} | {e.count} | {_pct(e.median)} | {_pct(e.p90)} | {_pct(e.worst)} |")
    if r.across:
        out += ["", f"Carried across GPUs: this fit, with the other GPU's datasheet figures, on {r.other}:", "",
                "| records | count | median | 90th percentile | worst |", "|---|---|---|---|---|"]
        out += [f"| {g} | {e.count} | {_pct(e.median)} | {_pct(e.p90)} | {_pct(e.worst)} |" for g, e in r.across.items()]
    out += ["", "## The model's choice against the best measured, per shape", "",
            "The first configuration in `ranked`'s order (its ties included) among those measured at the shape.", "",
            "| shape | idealised: regret | calibrated: choice | calibrated: regret | best measured |",
            "|---|---|---|---|---|"]
    ideal = {c.shape: c for c in r.choices["idealised"]}
    label = (lambda c: f"N={c['WARPGROUPS']} s_x={c['BLOCK_X']} {c['STAGES']}st {c['OVERLAP']}"
             + ("" if c["SCHEDULE"] == "tiles" else f" {c['SCHEDULE']}"))
    for c in r.choices["calibrated"]:
        i = ideal.get(c.shape)
        out.append(f"| {c.label} | {_pct(i.regret) if i else '-'} | {label(c.chosen)} | {_pct(c.regret)} "
                   f"| {label(c.best)} |")
    for model, picked in r.choices.items():
        regrets = sorted(c.regret for c in picked)
        within = sum(x <= 0.05 for x in regrets)
        out.append("")
        out.append(f"{model}: within 5 % of the best at {within} of {len(regrets)} shapes; median regret "
                   f"{_pct(regrets[len(regrets) // 2])}, worst {_pct(regrets[-1])}.")
    if r.variants is not None:
        out += variants_markdown(r.variants, r.base.name)
    return "\n".join(out) + "\n"


def write(r: Result, command: str, profile_path: str | None, report_path: str | None) -> list[Path]:
    return write_outputs(profile_path, lambda path: profile_yaml(r, command, path), report_path,
                         lambda: report_markdown(r, command))


def write_outputs(profile_path: str | None, profile_text, report_path: str | None, report_text) -> list[Path]:
    """The calibrated profile (`profile_text(path)`) and the report (`report_text()`) where their paths are
    given, written together or not at all."""
    files: dict[Path, str | bytes] = {}
    options: dict[Path, str] = {}
    if profile_path:
        files[Path(profile_path)] = profile_text(Path(profile_path))
        options[Path(profile_path)] = "--output"
    if report_path:
        files[Path(report_path)] = report_text()
        options[Path(report_path)] = "--report"
    return write_files(files, options) if files else []
