"""napkin measure's pipeline (analyzer.measure) on the CPU: the generated module run under Triton's
interpreter at small sizes, checked against float64, its timer replaced by one that says what it was
asked; and the command's screens, JSON and exit codes around it."""

from __future__ import annotations

import json

import pytest
from run_napkin import in_process

from analyzer import measure as measure_pkg
from analyzer.codegen import generate
from analyzer.measure import reference
from analyzer.measure.device import Device
from analyzer.measure.result import Measurement, TimingOut

torch = pytest.importorskip("torch")

H100 = Device(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 85_029_158_912)
SMALL = {"attention": {"q": 100, "x": 70, "d": 64}, "matmul": {"a": 48, "b": 80, "c": 40},
         "mlp2": {"n": 40, "i": 32, "f": 64, "o": 48}}


def clock(seconds: float, calls: list):
    """A timer that records the call it was given (and calls it once) and answers `seconds`."""
    def timer(fn, rep_ms):
        fn()
        calls.append(rep_ms)
        return TimingOut(method="a test's clock", repetitions_ms=rep_ms, time_s=seconds, time_s_p20=seconds * 0.99,
                         time_s_p80=seconds * 1.01)
    return timer


@pytest.mark.parametrize("diagram", sorted(SMALL))
def test_a_measurement_checks_the_kernel_then_times_it_beside_the_prediction(diagram):
    calls: list = []
    m = measure_pkg.measure(diagram, sets=SMALL[diagram], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(2e-3, calls), rep_ms=7.0)
    g = generate(diagram, "h100-sxm5", backend="triton", sets=SMALL[diagram])
    assert m.device.profile == "h100-sxm5" and "found from the device" in m.device.profile_found
    assert m.check.passed and 0 <= m.check.max_error <= m.check.tolerance and calls == [7.0]
    assert m.predicted.time_s == pytest.approx(g.expected.time_s)
    assert m.predicted.configuration == g.expected.configuration
    assert m.measured_over_predicted == pytest.approx(2e-3 / g.expected.time_s)
    assert m.throughput_flops_per_s == pytest.approx(g.expected.tensor_flops / 2e-3)
    assert all(m.sizes[k] == v for k, v in SMALL[diagram].items())
    assert Measurement.model_validate_json(m.model_dump_json()) == m


def test_a_wrong_kernel_is_not_timed(monkeypatch):
    """The check compares against the float64 reference: a reference moved by 1 % of its largest value
    fails it, and the timer is never asked."""
    real = reference.reference

    def moved(torch_, g, xs, sizes=None):
        want = real(torch_, g, xs, sizes)
        return want + 0.01 * want.abs().max()

    monkeypatch.setattr("analyzer.measure.run.reference", moved)
    calls: list = []
    m = measure_pkg.measure("matmul", sets=SMALL["matmul"], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(1.0, calls))
    assert not m.check.passed and m.check.max_error > m.check.tolerance
    assert m.timing is None and m.measured_over_predicted is None and calls == []


def test_a_given_profile_is_used_and_said_so():
    m = measure_pkg.measure("matmul", "a100", sets=SMALL["matmul"], device=H100, tensors_on="cpu",
                            timer=clock(1e-3, []))
    assert m.device.profile == "a100" and m.device.profile_found == "given with --gpu"
    assert m.predicted.backend == "triton"


@pytest.mark.parametrize("passed", [True, False])
def test_the_command_prints_writes_and_exits_as_the_check_says(passed, tmp_path, monkeypatch):
    """The screen, --json and -o carry the same measurement; a failed check exits 3 with one line."""
    m = measure_pkg.measure("matmul", sets=SMALL["matmul"], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(1e-3, []))
    if not passed:
        m = m.model_copy(update={"check": m.check.model_copy(update={"passed": False, "max_error": 1.0}),
                                 "timing": None, "measured_over_predicted": None, "throughput_flops_per_s": None})
    monkeypatch.setattr(measure_pkg, "measure", lambda *a, **k: m)
    screen = in_process(tmp_path, "measure", "matmul")
    shown = in_process(tmp_path, "measure", "matmul", "--json", "-o", "m.json")
    assert screen.returncode == shown.returncode == (0 if passed else 3)
    assert "h100-sxm5" in screen.stdout and ("passed" if passed else "FAILED") in screen.stdout
    assert Measurement.model_validate_json(shown.stdout) == m
    assert json.loads((tmp_path / "m.json").read_text()) == json.loads(shown.stdout)
    if not passed:
        assert screen.stderr.count("\n") == 1 and "wrong on this GPU" in screen.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_without_a_cuda_device_it_says_so_in_one_line(tmp_path):
    r = in_process(tmp_path, "measure", "attention")
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: no CUDA device")


def test_the_json_follows_napkin_schema_measurement(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(in_process(tmp_path, "schema", "measurement").stdout)
    m = measure_pkg.measure("mlp2", sets=SMALL["mlp2"], backend="triton", device=H100, tensors_on="cpu",
                            timer=clock(1e-3, []))
    jsonschema.Draft202012Validator(schema).validate(json.loads(m.model_dump_json()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_a_draft_without_a_cuda_device_says_so_and_writes_nothing(tmp_path):
    r = in_process(tmp_path, "hardware", "draft", "-o", "gpu.yaml")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no CUDA device" in r.stderr
    assert not (tmp_path / "gpu.yaml").exists()


# -- napkin measure --sweep ---------------------------------------------------------------------------

SMALL_GRID = dict(tokens=2048, hidden=256, lengths=(256, 512, 1024, 2048), head_dims=(64, 128))


def _model_gpu(profile_name: str):
    """A launch that computes attention in float64 at the checks' small shape (and nothing at the grid's),
    and a timer that answers what the calibrated model says of the configuration last launched."""
    from analyzer import hardware
    from analyzer.config import hopper
    profile, last = hardware.load(profile_name), {}

    def launch(fn, xs, kwargs, entry):
        last.update(entry=entry, shape=tuple(xs[0].shape), causal=kwargs["causal"])
        if xs[0].shape[2] > 300:
            return None
        q, k, v = (x.double() for x in xs[:3])
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=kwargs["causal"]).half()

    def timer(fn, rep_ms):
        fn()
        (b, h, s, d), e = last["shape"], last["entry"]
        c = hopper.configuration(profile, d, "fp16", warpgroups=e["WARPGROUPS"], chunk=e["BLOCK_X"],
                                 stages=e["STAGES"], overlap=e["OVERLAP"], schedule=e["SCHEDULE"],
                                 causal=last["causal"])
        t = hopper.predicted_time(profile, c, d, "fp16", seq_q=s, seq_k=s, instances=b * h, causal=last["causal"])
        return TimingOut(method="the model", repetitions_ms=rep_ms, time_s=t, time_s_p20=t, time_s_p80=t)
    return launch, timer


@pytest.mark.slow(seconds=30)
def test_a_sweep_writes_what_calibrate_fits_and_the_fit_predicts_it(tmp_path):
    """A sweep of attention and causal attention whose times are the calibrated H100 model's own: the
    configurations of the sampled design are recorded (every one the model ranks legal with --design full),
    and napkin calibrate, fitting the two sweeps written into one recording, predicts them and finds the
    tensor cores' efficiency the times were made with."""
    from analyzer import hardware
    from analyzer.calibrate.hopper import calibrate, predict
    from analyzer.calibrate.hopper import load as load_recording
    from analyzer.config.hopper_params import HopperParams
    from analyzer.measure.sweep import Grid, sweep
    launch, timer = _model_gpu("h100")
    path = tmp_path / "sweep.json"
    records = []
    for diagram in ("attention", "causal_attention"):
        doc = sweep(diagram, device=H100, tensors_on="cpu", grid=Grid(**SMALL_GRID), timer=timer, launch=launch)
        assert all(r["status"] == "ok" for r in doc["records"]) and doc["meta"]["profile"] == "h100-sxm5"
        if diagram == "attention":       # the full design times a superset, each at the same model rank
            full = sweep(diagram, device=H100, tensors_on="cpu", grid=Grid(**SMALL_GRID, design="full"),
                         timer=timer, launch=launch)["records"]
            ranks = {(r["seq_q"], r["head_dim"], json.dumps(r["config"], sort_keys=True)): r["model_rank"]
                     for r in full}
            assert len(full) > len(doc["records"]) and all(
                ranks[(r["seq_q"], r["head_dim"], json.dumps(r["config"], sort_keys=True))] == r["model_rank"]
                for r in doc["records"])
        records += doc["records"]
    path.write_text(json.dumps({"meta": doc["meta"], "records": records}))
    rec, measured = load_recording(str(path))
    assert {(r.head_dim, r.causal, r.seq_q) for r in measured} == \
        {(d, c, n) for d in (64, 128) for c in (False, True) for n in SMALL_GRID["lengths"]}
    result = calibrate(str(path), "h100", held_out=1024)
    fitted = predict(result.base, measured, result.fitted.params)
    times = [r.time_s for r in measured]
    errors = sorted(abs(p / t - 1) for p, t in zip(fitted, times, strict=True))
    # the times are the model's own, so a fit exists that predicts them exactly; the least squares from
    # its start lands within a percent on most (2026-11-28: median 0.2 %, 90th percentile 0.5 %)
    assert errors[len(errors) // 2] < 0.01 and errors[int(0.9 * len(errors))] < 0.02
    truth = HopperParams.of(hardware.load("h100"))
    assert result.fitted.params.tensor_efficiency == pytest.approx(truth.tensor_efficiency, rel=0.03)
    # the command writes the profile of a recording with no shapes beyond the grid (a traceback before)
    r = in_process(tmp_path, "calibrate", "sweep.json", "--gpu", "h100", "--kernel", "hopper", "-o", "fit.yaml")
    assert r.returncode == 0, r.stderr
    assert hardware.load(str(tmp_path / "fit.yaml")).calibration.hopper is not None


@pytest.mark.slow(seconds=3)
def test_a_chain_sweep_writes_what_the_chain_fit_reads(tmp_path):
    """On a Hopper profile, mlp2's sweep is the chain kernel's: its rows and stream at each side, its whole
    axes as generated (--set i=128 --set o=128), every legal configuration checked against float64 and timed, each
    record with the model's time and rank; napkin calibrate --kernel chain fits it, and with times that
    are the model's own (the contraction fit carried over: no wait, no power bound below the datasheet's),
    it predicts the side and the configurations it held out."""
    from analyzer.calibrate.chain import calibrate
    from analyzer.measure.sweep import sweep
    from analyzer.measure.sweep_contraction import ContractionGrid

    def clock(fn, rep_ms):
        fn()
        return TimingOut(method="none", repetitions_ms=rep_ms, time_s=1.0, time_s_p20=1.0, time_s_p80=1.0)
    doc = sweep("mlp2", device=H100, tensors_on="cpu", contraction=ContractionGrid(chain_sides=(2048, 4096, 16384)),
                timer=clock, launch=_computed, sets={"i": 128, "o": 128})
    assert doc["meta"]["calibrate"] == " --kernel chain"
    records = doc["records"]
    assert all("seconds" in r for r in records), [r.get("error") for r in records][:3]
    assert {(r["sizes"]["n"], r["sizes"]["f"]) for r in records} == {(2048, 2048), (4096, 4096), (16384, 16384)}
    assert {(r["sizes"]["i"], r["sizes"]["o"]) for r in records} == {(128, 128)}
    for side in (2048, 4096, 16384):
        ranks = sorted(r["model_rank"] for r in records if r["sizes"]["n"] == side)
        assert ranks == list(range(1, len(ranks) + 1))
    for r in records:
        r["seconds"] = r["p20"] = r["p80"] = r["predicted_s"]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    result = calibrate(str(path), "h100")
    cal = result.errors["calibrated"]
    # the times are the model's own: it predicts the side and the configurations it never saw (2026-11-28: 0.0 %)
    assert cal["held out"] < 0.01 and cal["train"] < 0.01 and cal.get("held-out configuration", 0) < 0.01
    assert result.kernel == "chain" and set(result.fit("test").model_dump(exclude_none=True)) >= {"wait_s",
                                                                                                  "power_efficiency"}


@pytest.mark.slow(seconds=3)
def test_a_contraction_sweep_writes_what_the_contraction_fit_reads(tmp_path):
    """On a Hopper profile, matmul's sweep is the Hopper contraction kernel's: every legal configuration
    at each square side, checked against float64 and timed, each record with the model's time and rank;
    napkin calibrate --kernel contraction fits it, and with times that are the shipped H100 fit's own,
    finds that fit's tensor efficiency and predicts the 4096 side it held out."""
    from analyzer import hardware
    from analyzer.calibrate.contraction import calibrate
    from analyzer.config.contraction import ContractionParams
    from analyzer.measure.sweep import sweep
    from analyzer.measure.sweep_contraction import ContractionGrid

    def clock(fn, rep_ms):       # the times are filled in below
        fn()
        return TimingOut(method="none", repetitions_ms=rep_ms, time_s=1.0, time_s_p20=1.0, time_s_p80=1.0)
    doc = sweep("matmul", device=H100, tensors_on="cpu", contraction=ContractionGrid(sides=(1024, 2048, 4096)),
                timer=clock, launch=_computed)
    assert doc["meta"]["calibrate"] == " --kernel contraction" and doc["gpu_profile"] == "h100-sxm5"
    records = doc["records"]
    assert all("seconds" in r for r in records) and {r["sizes"]["a"] for r in records} == {1024, 2048, 4096}
    by_side = [[r for r in records if r["sizes"]["a"] == n] for n in (1024, 2048, 4096)]
    assert all(sorted(r["model_rank"] for r in rs) == list(range(1, len(rs) + 1)) for rs in by_side)
    for r in records:
        r["seconds"] = r["p20"] = r["p80"] = r["predicted_s"]         # the shipped fit's own times
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    result = calibrate(str(path), "h100")
    truth = ContractionParams.of(hardware.load("h100"))
    assert result.params.tensor_efficiency == pytest.approx(truth.tensor_efficiency, rel=0.02)
    # the times are the model's own: the fit predicts the side it never saw (2026-11-28: 0.0 %)
    assert result.errors["calibrated"]["held out"] < 0.01 and result.errors["calibrated"]["train"] < 0.01


def test_the_sweep_command_adds_to_its_recording(tmp_path, monkeypatch):
    """Two sweeps into one file: the second's records after the first's, the first's meta kept."""
    from analyzer.measure import sweep as sweep_module
    launch, timer = _model_gpu("h100")
    grid = sweep_module.Grid(tokens=1024, hidden=128, lengths=(512, 1024), head_dims=(64,))
    real = sweep_module.sweep
    monkeypatch.setattr(sweep_module, "sweep", lambda diagram, gpu, **k: real(
        diagram, gpu, sets=k["sets"], command=k["command"], workers=k["workers"], grid=grid, device=H100,
        tensors_on="cpu", timer=timer,
        launch=launch))
    first = in_process(tmp_path, "measure", "attention", "--sweep", "rec.json")
    second = in_process(tmp_path, "measure", "causal_attention", "--sweep", "rec.json")
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    doc = json.loads((tmp_path / "rec.json").read_text())
    assert {r["diagram"] for r in doc["records"]} == {"attention", "causal_attention"}
    assert doc["meta"]["added_to"][0]["command"] == "napkin measure attention --sweep rec.json"
    assert "fit them with napkin calibrate rec.json --gpu h100-sxm5 --kernel hopper" in second.stdout


A100 = Device(0, "NVIDIA A100-SXM4-80GB", "8.0", 108, 85_097_971_712)


def _computed(fn, xs, kwargs, entry):
    """A launch that computes the diagram in float64 at the checks' small shapes, nothing at the grid's."""
    if max(x.shape[-2] for x in xs) > 300:
        return None
    if "causal" in kwargs:
        q, k, v = (x.double() for x in xs[:3])
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=kwargs["causal"]).half()
    if len(xs) == 3:             # mlp2: relu(X W1) W2
        x, w1, w2 = (t.double() for t in xs)
        return (torch.relu(x @ w1) @ w2).half()
    a, b = (x.double() for x in xs)
    return (a @ b).half()


@pytest.mark.slow(seconds=40)
def test_a_portable_sweep_writes_what_the_portable_fit_reads(tmp_path):
    """On a GPU before Hopper the sweep is the portable module's: attention's and matmul's legal
    configurations at their grids, each record as bench/sweep_h200.py writes it; napkin calibrate fits
    them, and with times that are the datasheet model's own, its fit predicts them."""
    from analyzer.calibrate.calibrate import calibrate
    from analyzer.calibrate.record import load_recording
    from analyzer.measure.sweep import sweep
    from analyzer.measure.sweep_portable import PortableGrid
    grid = PortableGrid(tokens=8192, hidden=256, lengths=(1024, 2048, 8192), head_dims=(64,),
                        sides=(512, 1024, 6144))

    def clock(fn, rep_ms):      # the times are filled in below
        return TimingOut(method="none", repetitions_ms=rep_ms, time_s=1.0, time_s_p20=1.0, time_s_p80=1.0)
    records = []
    for diagram in ("attention", "matmul"):
        doc = sweep(diagram, device=A100, tensors_on="cpu", portable=grid, timer=clock, launch=_computed)
        assert doc["meta"]["profile"] == "a100" and all(r["status"] == "ok" for r in doc["records"])
        records += [{**r, "time_s": r["predicted_s"]} for r in doc["records"]]     # the model's own times
    assert {r["family"] for r in records} == {"attention", "matmul"}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"meta": doc["meta"], "records": records}))
    assert len(load_recording(path).records) == len(records)
    result = calibrate(str(path), "a100", samples=2)
    errors = sorted(abs(p / r.time_s - 1) for p, r in zip(result.predictions["calibrated"], result.records,
                                                           strict=True))
    # the times are the model's own: the fit finds a model that predicts them (2026-11-28: 408 records,
    # the largest error 0.06 %)
    assert len(records) > 100 and errors[len(errors) // 2] < 0.01 and errors[int(0.9 * len(errors))] < 0.02


# -- compiling a sweep's configurations ahead (analyzer.measure.ahead) ------------------------------------

def test_configurations_are_compiled_once_per_specialisation():
    """Triton tells an integer apart by its being 1 and dividing by 16: shapes alike in that share a
    compilation, so a configuration is launched ahead once per such class, the first call of it kept."""
    from analyzer.measure.ahead import jobs
    a, b = {"BLOCK": 64}, {"BLOCK": 128}
    calls = [([[16, 32, 1024, 64]], {"causal": False}, a), ([[32, 32, 512, 64]], {"causal": False}, a),
             ([[1, 32, 16384, 64]], {"causal": False}, a), ([[1, 2, 273, 64]], {"causal": False}, a),
             ([[16, 32, 1024, 64]], {"causal": False}, dict(b))]
    out = jobs(calls)
    assert [c[0] for c in out['{"BLOCK": 64}']] == [[[16, 32, 1024, 64]], [[1, 32, 16384, 64]], [[1, 2, 273, 64]]]
    assert len(out['{"BLOCK": 128}']) == 1


@pytest.mark.slow(seconds=5)
def test_worker_processes_launch_each_configuration_ahead(tmp_path):
    """The workers import the written module and launch it: each configuration once per specialisation,
    with inputs of the calls' shapes (a module that logs its launches stands in for a kernel)."""
    from analyzer.measure.ahead import compile_ahead
    module = tmp_path / "logged.py"
    module.write_text("import json, pathlib\n"
                      "def entry(*xs, causal, config):\n"
                      "    with open(pathlib.Path(__file__).with_suffix('.log'), 'a') as f:\n"
                      "        f.write(json.dumps([[list(x.shape) for x in xs], causal, config]) + '\\n')\n")
    calls = [([[2, 3, 16], [2, 3, 16]], {"causal": c}, {"B": b}) for b in (16, 32, 64) for c in (True, False)]
    calls += [([[1, 3, 17], [1, 3, 17]], {"causal": True}, {"B": 16})]
    seen = []
    assert compile_ahead(module, "entry", "float32", calls, workers=2, device="cpu",
                         progress=lambda what, done, total: seen.append((done, total))) == 3
    logged = sorted((tmp_path / "logged.log").read_text().splitlines())
    first = [[[2, 3, 16], [2, 3, 16]], True]          # the first call of each specialisation (a flag is none)
    assert logged == sorted(json.dumps(call) for call in [*([*first, {"B": b}] for b in (16, 32, 64)),
                                                          [[[1, 3, 17], [1, 3, 17]], True, {"B": 16}]])
    assert seen[-1] == (3, 3)


@pytest.mark.slow(seconds=2)
def test_a_sweep_compiles_ahead_where_it_checks_and_where_it_times(monkeypatch):
    """Every configuration a sweep records is launched ahead at the shape it is checked at and at each
    shape it is timed at (one per specialisation)."""
    from analyzer.measure import trial
    from analyzer.measure.ahead import specialisation
    from analyzer.measure.reference import inputs
    from analyzer.measure.sweep import Grid, sweep
    asked = []
    monkeypatch.setattr(trial, "compile_ahead", lambda module, entry, element, calls, workers, *a: asked.extend(
        calls) or assert_module(module, entry, element, workers))

    def assert_module(module, entry, element, workers):
        assert module.exists() and entry == "attention" and element == "float16" and workers == 3
    launch, timer = _model_gpu("h100")
    grid = Grid(tokens=1024, hidden=128, lengths=(512, 1024), head_dims=(64,))
    doc = sweep("attention", device=H100, tensors_on="cpu", grid=grid, timer=timer, launch=launch, workers=3)
    g = generate("attention", "h100-sxm5")
    warmed = {(json.dumps(config, sort_keys=True), specialisation(shapes, kwargs)) for shapes, kwargs, config in asked}
    check = inputs(g, trial.small(g, 64))
    for r in doc["records"]:
        key = json.dumps(r["config"], sort_keys=True)
        timed = inputs(g, {"batch": r["batch"], "heads": r["heads_q"], "q": r["seq_q"], "x": r["seq_k"], "d": 64})
        assert (key, specialisation(*check)) in warmed and (key, specialisation(*timed)) in warmed
