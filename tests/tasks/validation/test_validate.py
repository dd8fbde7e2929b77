"""Published rows predicted by the search's models: reading runs files (defaults, errors that
name the row), the FLOP formulas, and what the shipped data must show (every run feasible,
Korthikanti et al.'s Table 4 within 10 %)."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

import pytest

from sweeps.config import load_preset
from tasks.model.kernels.layer import Block
from tasks.validation.predict_runs import find_profile, predict_run, run_hardware, run_model, run_stack
from tasks.validation.records import RowError, lean
from tasks.validation.runs import read_runs
from tasks.validation.throughput import flops_per_step
from tasks.validation.validate import validate_all, validate_runs

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "conf" / "data"
HEADER = (DATA / "published_runs.csv").read_text(encoding="utf-8").splitlines()[0]


@pytest.fixture(scope="module")
def profiles():
    names = [p.stem for p in (ROOT / "conf" / "hardware").glob("*.yaml")]
    return {hw.name: hw for hw in (load_preset("hardware", name) for name in names)}


def _runs(tmp_path, *rows: str) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def _row(**cells) -> str:
    base = dict(source="t", model="m", layers="24", hidden="2304", heads="24", seq="2048", tp="1", pp="1", dp="32",
                gpus="32", global_batch="512", hw="A100-SXM-80GB", metric="iter_time", value="3.0")
    base.update(cells)
    return ",".join(base.get(column, "") for column in HEADER.split(","))


def test_blank_cells_take_the_documented_defaults(tmp_path):
    (run,) = read_runs(_runs(tmp_path, _row(dp="", gpus="32")))
    assert (run.dp, run.kv_heads, run.ffn_hidden, run.vp, run.micro_batch) == (32, 24, 4 * 2304, 1, None)
    assert run.zero == "none"
    assert (run.recompute, run.precision, run.flops_formula, run.flash_attention) == ("none", "bf16", "model", False)
    assert run.dp_overlap is False          # no fused attention: a Megatron-LM before September 2023
    assert run.pp_overlap is False and run_stack(run).pp_overlap is False
    (modern,) = read_runs(_runs(tmp_path, _row(flash_attention="true")))
    assert modern.dp_overlap is True
    assert modern.pp_overlap is True and run_stack(modern).pp_overlap is True   # a 2023 or later stack
    path = tmp_path / "stated.csv"
    path.write_text("\n".join([HEADER + ",pp_overlap", _row(flash_attention="true") + ",false"]) + "\n",
                    encoding="utf-8")
    (stated,) = read_runs(path)
    assert stated.dp_overlap is True and run_stack(stated).pp_overlap is False
    assert run.elementwise == "fused" and run_stack(run).elementwise == "fused"
    (eager,) = read_runs(_runs(tmp_path, _row(elementwise="Eager")))
    assert run_stack(eager).eager


def test_a_runs_file_saved_with_a_byte_order_mark_or_windows_line_ends_reads_as_any_other(tmp_path):
    """Spreadsheets save "CSV UTF-8" with a byte order mark before the header and CRLF line ends."""
    (plain,) = read_runs(_runs(tmp_path, _row()))
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join([HEADER, _row()]).encode("utf-8") + b"\r\n")
    (saved,) = read_runs(path)
    assert replace(saved, path=plain.path) == plain


def test_metrics_are_read_in_their_own_unit_whatever_a_row_spells(tmp_path):
    rows = [_row(metric="step_time", value="3000", unit="ms"), _row(metric="mfu", value="0.45", unit=""),
            _row(metric="mfu", value="0.45", unit="fraction"), _row(metric="mfu", value="45", unit="%"),
            _row(metric="tokens_per_s", value="300000")]
    got = [(r.metric, r.value) for r in read_runs(_runs(tmp_path, *rows))]
    assert got == [("iter_time", pytest.approx(3.0)), ("mfu", pytest.approx(45.0)), ("mfu", pytest.approx(45.0)),
                   ("mfu", pytest.approx(45.0)), ("tokens_per_s", pytest.approx(3e5))]
    (spelled,) = read_runs(_runs(tmp_path, _row(precision="BFloat16", recompute="true")))
    assert (spelled.precision, spelled.recompute) == ("bf16", "full")
    with pytest.raises(RowError, match="row 1: unit='hours' is not a unit of iter_time"):
        read_runs(_runs(tmp_path, _row(unit="hours")))


@pytest.mark.parametrize("cells, named", [
    (dict(gpus="48"), "row 2: gpus=48"),
    (dict(hidden="wide"), "row 2: hidden='wide'"),
    (dict(metric="speed"), "row 2: metric='speed'"),
    (dict(recompute="some"), "row 2: recompute='some'"),
    (dict(elementwise="jit"), "row 2: elementwise='jit' is not one of fused, eager"),
    (dict(heads="7"), "row 2: heads=7 does not divide hidden=2304"),
    (dict(kv_heads="5"), "row 2: kv_heads=5 does not divide heads=24"),
    (dict(kv_heads="48"), "row 2: kv_heads=48 does not divide heads=24"),
    (dict(zero="4"), "row 2: zero='4' is not a ZeRO stage"),
    (dict(zero="zero2"), "row 2: zero='zero2' is not a ZeRO stage"),
])
def test_a_bad_row_is_refused_naming_the_row_and_the_field(tmp_path, cells, named):
    with pytest.raises(RowError, match=named.replace("(", r"\(")):
        read_runs(_runs(tmp_path, _row(), _row(**cells)))


def test_a_gated_mlp_column_says_what_the_width_alone_cannot(tmp_path, profiles):
    """Blank, the MLP is gated where ffn_hidden is not 4 x hidden; a cell overrides that both ways
    (PaLM's gated MLP is 4 x hidden wide), and a gated MLP costs its third matrix."""
    path = tmp_path / "gated.csv"
    rows = [_row() + ",", _row(ffn_hidden="6144") + ",", _row() + ",true", _row(ffn_hidden="6144") + ",false"]
    path.write_text("\n".join([HEADER + ",gated_mlp", *rows]) + "\n", encoding="utf-8")
    plain, narrow, palm, narrow_plain = read_runs(path)
    assert [r.gated_mlp for r in (plain, narrow, palm, narrow_plain)] == [False, True, True, False]
    assert run_model(palm).gated_mlp and not run_model(plain).gated_mlp
    hw = find_profile(plain.hw, profiles)
    same_dropout = replace(palm, dropout=plain.dropout)   # a blank cell leaves a gated MLP without dropout
    step = {name: predict_run(r, hw).step_time_s for name, r in (("plain", plain), ("palm", same_dropout))}
    assert step["palm"] > 1.1 * step["plain"]          # a third MLP matrix: the MLP's GEMMs grow by half
    path.write_text("\n".join([HEADER + ",gated_mlp", _row() + ",maybe"]) + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="row 1: gated_mlp='maybe' must be true or false"):
        read_runs(path)


def test_a_token_dropping_row_is_skipped_with_why_and_the_files_other_rows_are_predicted(tmp_path, profiles):
    """A row whose router drops tokens at a capacity factor is no error in the file, but the
    model prices dropless routing only: read alone it is refused naming the column, and
    ``validate`` lists it as skipped (never predicting it as a dropless run) while it predicts
    the file's other rows."""
    path = tmp_path / "dropping.csv"
    path.write_text("\n".join([HEADER + ",capacity_factor", _row() + ",0", _row() + ",1.0", _row(value="4.0") + ","])
                    + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="row 2: capacity_factor='1.0' token dropping at an expert capacity factor"):
        read_runs(path)
    skipped: list = []
    assert [run.row for run in read_runs(path, skipped)] == [1, 3]
    assert skipped == ["dropping.csv row 2: capacity_factor='1.0' token dropping at an expert capacity factor is not "
                       "modelled (dropless routing is): this row cannot be predicted"]
    result = validate_all(profiles, DATA, runs_file=path, datasets=("runs",))
    assert [r.row for r in result.records] == [1, 3] and result.skipped == skipped
    path.write_text("\n".join([HEADER + ",capacity_factor", _row() + ",1.25"]) + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="holds no rows the model expresses"):
        read_runs(path, [])


def test_a_mixture_of_experts_row_is_priced_and_its_bad_cells_named(tmp_path, profiles):
    """A row with experts and EP is read into the model's fields and predicted; a cell that
    cannot describe a mixture of experts is refused naming it."""
    moe = ",experts,topk,moe_ffn_hidden,ep,dispatcher,moe_a2a_overlap"
    path = tmp_path / "moe.csv"
    path.write_text("\n".join([HEADER + moe, _row() + ",8,2,,2,flex,true"]) + "\n", encoding="utf-8")
    [run] = read_runs(path)
    assert (run.experts, run.topk, run.ep, run.dispatcher, run.moe_a2a_overlap) == (8, 2, 2, "flex", True)
    assert validate_all(profiles, DATA, runs_file=path, datasets=("runs",)).records[0].predicted > 0
    for cells, field in ((",8,0,,2,,", "topk"), (",0,0,,2,,", "ep"), (",8,2,,2,nccl,", "dispatcher")):
        path.write_text("\n".join([HEADER + moe, _row() + cells]) + "\n", encoding="utf-8")
        with pytest.raises(RowError, match=f"row 1.*{field}"):
            read_runs(path)
    path.write_text("\n".join([HEADER + ",ep", _row() + ",many"]) + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="row 1: ep='many'"):
        read_runs(path, [])


def test_a_rows_cuda_graph_scope_is_read_and_a_scope_megatron_core_lacks_refused(tmp_path, profiles):
    """A row whose attention sublayers replay from CUDA graphs launches fewer kernels from its
    host, so on a host slow enough to pace it (20 ms a kernel) it is predicted faster than the
    same row eager; "mlp" is refused, named."""
    path = tmp_path / "graphs.csv"
    path.write_text("\n".join([HEADER + ",flash_attention,host_launch_us,cuda_graph_scope",
                               _row() + ",true,20000,attn", _row() + ",true,20000,"]) + "\n", encoding="utf-8")
    graphed, eager = read_runs(path)
    assert (graphed.cuda_graph_scope, eager.cuda_graph_scope) == ("attn", "")
    graphed_out, eager_out = validate_all(profiles, DATA, runs_file=path, datasets=("runs",)).records
    assert graphed_out.predicted < 0.9 * eager_out.predicted
    path.write_text("\n".join([HEADER + ",cuda_graph_scope", _row() + ",mlp"]) + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="row 1: cuda_graph_scope='mlp' 'mlp' is not a scope"):
        read_runs(path)


def _cp_runs(tmp_path, rows) -> Path:
    """A runs file with ``cp`` and ``cp_comm`` columns: each of ``rows`` (cells, cp, cp_comm)."""
    path = tmp_path / "cp.csv"
    path.write_text("\n".join([HEADER + ",cp,cp_comm", *(_row(**cells) + f",{cp},{comm}" for cells, cp, comm in rows)])
                    + "\n", encoding="utf-8")
    return path


def test_a_context_parallel_row_counts_its_cp_ranks_and_is_priced_with_its_exchange(tmp_path, profiles):
    """CP ranks are GPUs of their own (TP x PP x CP x DP), a blank DP follows from them, and a
    CP row is priced: its ranks each run half the sequence, so it is no slower than twice the
    ranks' DP would make it, and all-gathering K/V costs what the ring hides."""
    flash = dict(flash_attention="true", seq="16384", dp="", gpus="32", global_batch="64", micro_batch="1")
    ring, gathered, plain = read_runs(_cp_runs(tmp_path, [(flash, "2", ""), (flash, "2", "all_gather"),
                                                          (flash, "", "")]))
    assert (ring.cp, ring.dp, ring.gpus, ring.cp_comm) == (2, 16, 32, "p2p")
    assert (gathered.cp_comm, plain.cp, plain.dp) == ("all_gather", 1, 32)
    hw = find_profile(ring.hw, profiles)
    ring_p, gathered_p = predict_run(ring, hw), predict_run(gathered, hw)
    assert ring_p.layout.cp == 2 and ring_p.layout.describe().startswith("tp1 cp2 pp1 dp16")
    assert gathered_p.step_time_s > ring_p.step_time_s
    assert ring_p.memory_gb < predict_run(plain, hw).memory_gb


@pytest.mark.parametrize("cells, cp, comm, named", [
    (dict(flash_attention="true", dp="", gpus="32"), "3", "", "row 1: cp='3' does not split 2048-token sequences"),
    (dict(dp="", gpus="32"), "2", "", "row 1: cp='2' needs fused (flash) attention"),
    (dict(flash_attention="true"), "2", "", "row 1: gpus=32 is not tp x pp x cp x dp = 1 x 1 x 2 x 32 = 64"),
    (dict(flash_attention="true", dp="", gpus="32"), "2", "ring", "row 1: cp_comm='ring' is not one of p2p"),
    (dict(flash_attention="true", dp="", gpus="32"), "0", "", "row 1: cp='0'"),
])
def test_a_context_parallel_row_that_cannot_run_is_refused_naming_the_field(tmp_path, cells, cp, comm, named):
    with pytest.raises(RowError, match=re.escape(named)):
        read_runs(_cp_runs(tmp_path, [(cells, cp, comm)]))


def test_a_dropout_column_says_whether_the_layers_drop_out(tmp_path, profiles):
    path = tmp_path / "dropout.csv"
    path.write_text("\n".join([HEADER + ",dropout",
                               *(_row(flash_attention="true") + f",{v}" for v in ("", "0", "0.1"))])
                    + "\n", encoding="utf-8")
    default, none, some = read_runs(path)
    assert (default.dropout, none.dropout, some.dropout) == (0.1, 0.0, 0.1)
    assert not run_model(none).dropout and run_model(some).dropout == 0.1
    hw = find_profile(none.hw, profiles)
    assert predict_run(none, hw).step_time_s < predict_run(some, hw).step_time_s
    for bad in ("1", "-0.1", "half"):
        path.write_text("\n".join([HEADER + ",dropout", _row() + f",{bad}"]) + "\n", encoding="utf-8")
        with pytest.raises(RowError, match=f"row 1: dropout='{bad}'"):
            read_runs(path)


def test_a_gated_mlp_trains_without_dropout_unless_the_row_says_otherwise(tmp_path):
    """Models with gated MLPs (Llama, PaLM) pre-train without dropout; GPT runs keep Megatron's 0.1."""
    llama = dict(hidden="4096", heads="32", ffn_hidden="11008")
    path = tmp_path / "gated.csv"
    path.write_text("\n".join([HEADER + ",gated_mlp,dropout", _row(**llama) + ",,", _row(**llama) + ",,0.1",
                               _row() + ",true,", _row() + ",,"]) + "\n", encoding="utf-8")
    blank, stated, palm, gpt = read_runs(path)
    assert (blank.gated_mlp, stated.gated_mlp, palm.gated_mlp, gpt.gated_mlp) == (True, True, True, False)
    assert (blank.dropout, stated.dropout, palm.dropout, gpt.dropout) == (0.0, 0.1, 0.0, 0.1)
    assert run_model(blank).dropout == 0.0


def test_a_recompute_layers_column_recomputes_that_many_layers_of_each_stage(tmp_path, profiles):
    path = tmp_path / "partial.csv"
    path.write_text("\n".join([HEADER + ",recompute_layers",
                               *(_row(recompute=r) + f",{n}" for r, n in (("full", ""), ("full", "1"), ("none", "")))])
                    + "\n", encoding="utf-8")
    every, one, none = read_runs(path)
    assert (every.recompute_layers, one.recompute_layers) == (0, 1)
    hw = find_profile(one.hw, profiles)
    steps = [predict_run(run, hw).step_time_s for run in (none, one, every)]
    assert steps == sorted(steps) and len(set(steps)) == 3
    for cells, bad in ((dict(recompute="selective"), "2"), (dict(recompute="full"), "-1"),
                       (dict(recompute="full"), "x")):
        path.write_text("\n".join([HEADER + ",recompute_layers", _row(**cells) + f",{bad}"]) + "\n", encoding="utf-8")
        with pytest.raises(RowError, match=f"row 1: recompute_layers='?{bad}'?"):
            read_runs(path)


def test_unknown_hardware_and_impossible_layouts_name_their_row(tmp_path, profiles):
    with pytest.raises(RowError, match="row 2: hw='TPU-Z'"):
        validate_all(profiles, DATA, runs_file=_runs(tmp_path, _row(), _row(hw="TPU-Z")), datasets=("runs",))
    with pytest.raises(RowError, match="row 2: precision='fp8' cannot run on a100-80gb: hardware.peak_fp8_tflops"):
        validate_all(profiles, DATA, runs_file=_runs(tmp_path, _row(), _row(precision="fp8")), datasets=("runs",))
    with pytest.raises(RowError, match="row 1: layout=.*tp_divides_heads"):
        validate_all(profiles, DATA, runs_file=_runs(tmp_path, _row(tp="16", dp="2")), datasets=("runs",))


def test_narayanans_formula_counts_one_more_forward_per_layer():
    shape = dict(layers=24, hidden=2304, heads=24, seq=2048, vocab=51200, global_batch=512, block=Block())
    model, narayanan = flops_per_step("model", **shape), flops_per_step("narayanan", **shape)
    b, s, layers, h, v = 512, 2048, 24, 2304, 51200
    assert narayanan == pytest.approx(96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h)))
    assert model == pytest.approx(72 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (12 * layers * h)))


def test_maxtexts_2024_count_is_six_flops_a_parameter_a_token_and_half_the_attention_square():
    """Llama 2 7B as MaxText counted it at efb6d9e4a: 6 N per token for its 6.738 billion
    parameters (the norms' 266,240 left out), and causal attention 6 l h s^2 per sequence."""
    shape = dict(layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, global_batch=4,
                 block=Block(ffn=11008.0, gated=True))
    attention = 4 * 6 * 32 * 4096 * 4096**2
    per_token = (flops_per_step("maxtext2024", **shape) - attention) / (4 * 4096)
    assert per_token / 6 == pytest.approx(6_738_415_616 - 266_240, rel=1e-12)
    assert flops_per_step("maxtext2024", **shape) < flops_per_step("model", **shape)   # half the attention square


def test_a_zero_cell_names_a_stage_or_a_sharding_mode(tmp_path, profiles):
    """A hybrid-sharded run (FSDP inside a node, replicas across) is a row of its own mode,
    priced as that layout is; ZeRO-2 communicates as ZeRO-1."""
    rows = [_row(zero=z, flash_attention="true") for z in ("hsdp", "FSDP", "2", "zero1", "3")]
    hsdp, fsdp, two, one, three = read_runs(_runs(tmp_path, *rows))
    assert (hsdp.zero, fsdp.zero, two.zero, one.zero, three.zero) == ("hsdp", "fsdp", "zero1", "zero1", "zero3")
    hw = run_hardware(hsdp, find_profile(hsdp.hw, profiles))
    times = {run.zero: predict_run(run, hw).step_time_s for run in (hsdp, fsdp, three)}
    assert times["hsdp"] != times["fsdp"]        # one micro-batch each: FSDP reduces as ZeRO-3 does
    assert times["fsdp"] == pytest.approx(times["zero3"], rel=1e-12)  # summed in another order
    assert predict_run(two, hw).step_time_s == predict_run(one, hw).step_time_s


def test_every_shipped_run_is_feasible_and_table_4_holds_within_ten_percent(profiles):
    result = validate_all(profiles, DATA, datasets=("runs", "layers"))
    runs = [r for r in result.records if r.dataset == "runs"]
    assert len(runs) == 19 and not [r for r in runs if "usable" in r.detail]
    layers = [r for r in result.records if r.dataset == "layers"]
    assert len(layers) == 10 and max(abs(r.error) for r in layers) < 0.10


def test_every_held_out_run_names_its_source_and_is_predicted_on_a_profile(profiles):
    runs = read_runs(DATA / "holdout_runs.csv")
    assert len(runs) == 61 and all(find_profile(run.hw, profiles) for run in runs)
    notes = [row["notes"] for row in csv.DictReader((DATA / "holdout_runs.csv").open(encoding="utf-8"))]
    assert all(re.search(r"commit [0-9a-f]{7,}|arXiv \d{4}\.\d{5}", note) for note in notes)
    result = validate_all(profiles, DATA, runs_file=DATA / "holdout_runs.csv", datasets=("runs",))
    assert len(result.records) == 61 and not result.skipped


def test_maxtexts_minimal_flash_runs_all_but_the_linear_layers_again(profiles):
    """MaxText's minimal_flash of April 2024 kept only the weight GEMMs' outputs (no tensor was
    named 'context' until a653c03cf): its A3 rows state JAX's ``dots`` policy, which re-runs the
    attention core's forward and the element-wise work, so each takes longer than read as
    selective recomputation, and keeps less: every one now fits the usable share of an H100,
    where selective recomputation's accounting (the element-wise outputs kept) did not."""
    runs = [run for run in read_runs(DATA / "holdout_runs.csv") if run.source == "maxtext2404_a3"]
    assert len(runs) == 5 and {run.recompute for run in runs} == {"dots"}
    hw = find_profile(runs[0].hw, profiles)
    for run in runs:
        dots, selective = predict_run(run, hw), predict_run(replace(run, recompute="selective"), hw)
        assert dots.step_time_s > selective.step_time_s
        assert dots.memory_verdict == "fits" and selective.memory_verdict == "tight"


def test_nemos_launcher_runs_of_2024_ran_flashattention_2(profiles):
    """NeMo-Framework-Launcher set NVTE_FUSED_ATTN=0 from 24.01 through 24.07, so the NeMo
    24.03.01 long-sequence and 24.07 performance rows ran FlashAttention-2, not cuDNN's fused
    attention: each is priced slower than as cuDNN, and the long-sequence rows, whose step is
    mostly attention, come within 10 % where cuDNN's rate leaves them up to 49 % too fast."""
    runs = [run for run in read_runs(DATA / "holdout_runs.csv") if run.source.startswith("nemo24")]
    assert len(runs) == 16 and {run.attention_impl for run in runs} == {"flash2"}
    hw = find_profile(runs[0].hw, profiles)
    for run in runs:
        assert predict_run(run, hw).value < predict_run(replace(run, attention_impl="cudnn"), hw).value
    long_seq = [run for run in runs if run.source == "nemo2403_longseq_h100_fp8"]
    flash2 = validate_runs(long_seq, profiles)
    cudnn = validate_runs([replace(run, attention_impl="cudnn") for run in long_seq], profiles)
    assert max(abs(r.error) for r in flash2) < 0.10 < max(r.error for r in cudnn)


def test_a_row_names_its_fused_attention_kernel(tmp_path):
    """attention_impl: blank is cuDNN's kernel; flash2 and flash3 are read; another name, or a
    kernel on a row without fused attention, is refused naming the column."""
    flash = dict(hw="H100-SXM5-80GB", flash_attention="true")
    blank, fa3 = read_runs(_with(tmp_path, "attention_impl", _row(**flash) + ",", _row(**flash) + ",flash3"))
    assert (run_stack(blank).attention_impl, run_stack(fa3).attention_impl) == ("cudnn", "flash3")
    for row in (_row(**flash) + ",xformers", _row(hw="H100-SXM5-80GB") + ",flash2"):
        with pytest.raises(RowError, match="attention_impl"):
            read_runs(_with(tmp_path, "attention_impl", row))


def test_an_fp16_run_accumulates_16_bit_gradients_and_a_bf16_run_fp32():
    runs = read_runs(DATA / "published_runs.csv")
    widths = {run.precision: run_stack(run).main_grad_bytes for run in runs}
    assert widths == {"bf16": 4.0, "fp16": 2.0}


def test_the_2019_run_is_costed_with_its_unfused_kernels_and_only_it(profiles):
    runs = read_runs(DATA / "published_runs.csv")
    assert [run.source for run in runs if run.elementwise == "eager"] == ["shoeybi19_mp"]
    (run,) = [run for run in runs if run.elementwise == "eager"]
    hw = find_profile(run.hw, profiles)
    eager, fused = predict_run(run, hw), predict_run(replace(run, elementwise="fused"), hw)
    assert eager.step_time_s > 1.2 * fused.step_time_s   # its scores are scaled and masked in kernels of their own


def test_hardware_names_match_their_profile_however_spelled(profiles):
    for spelled in ("H100-SXM", "h100 sxm", "H100-SXM5-80GB", "h100"):
        assert find_profile(spelled, profiles).name == "h100", spelled
    for spelled in ("A100-SXM-80GB", "NVIDIA A100-SXM4-80GB", "A100 80GB", "DGX A100", "A100"):
        assert find_profile(spelled, profiles).name == "a100-80gb", spelled   # no size: the larger part
    for spelled in ("A100-SXM-40GB", "NVIDIA A100-SXM4-40GB", "a100 40gb"):
        assert find_profile(spelled, profiles).name == "a100-40gb", spelled
    for spelled in ("V100-SXM2-32GB", "Tesla V100 32GB"):
        assert find_profile(spelled, profiles).name == "v100", spelled
    assert find_profile("AMD Instinct MI300X", profiles).name == "mi300x"
    for spelled in ("MI250X", "AMD Instinct MI250X", "MI250X-GCD"):
        assert find_profile(spelled, profiles).name == "mi250x", spelled
    assert find_profile("DGX-B200", profiles).name == "b200" and find_profile("DGX-GB200", profiles).name == "gb200"
    for unknown in ("TPU-Z", "A100-PCIe-40GB", "H100 PCIe", "V100 16GB", "GH200", "A100-SXM-96GB", "MI250", "MI300"):
        assert find_profile(unknown, profiles) is None, unknown


def _with(tmp_path, columns: str, *rows: str) -> Path:
    path = tmp_path / "extra.csv"
    path.write_text("\n".join([HEADER + "," + columns, *rows]) + "\n", encoding="utf-8")
    return path


def test_fp8_weights_and_offloaded_layers_are_read_and_refused_as_megatron_core_refuses_them(tmp_path):
    h100 = dict(hw="H100-SXM5-80GB", flash_attention="true")
    path = _with(tmp_path, "fp8_params,offload_layers", _row(**h100) + ",,", _row(precision="fp8", **h100) + ",true,4")
    blank, stated = read_runs(path)
    assert (blank.fp8_params, blank.offload_layers) == (False, 0)
    assert (run_stack(stated).fp8_params, run_stack(stated).offload_layers) == (True, 4)
    refused = {
        "fp8_params='true' needs precision fp8, not bf16": _row(**h100) + ",true,",
        "offload_layers=24 must be below the model's 24 layers": _row(**h100) + ",,24",
        "offload_layers=4 needs pp 1, not 2": _row(pp="2", dp="16", **h100) + ",,4",
        "offload_layers=4 needs recompute none, not full": _row(recompute="full", **h100) + ",,4",
    }
    for why, row in refused.items():
        with pytest.raises(RowError, match=f"row 1: {re.escape(why)}"):
            read_runs(_with(tmp_path, "fp8_params,offload_layers", row))


def test_memory_is_judged_against_the_usable_share_and_against_the_whole_device(tmp_path, profiles):
    """A run over the usable share but within the device's HBM is "tight"; beyond the HBM,
    "over": the model then contradicts a run that ran."""
    big = dict(layers="32", hidden="4096", heads="32", seq="4096", tp="1", pp="1", dp="8", gpus="8",
               global_batch="16", micro_batch="2", hw="H100-SXM5-80GB", flash_attention="true")
    (run,) = read_runs(_runs(tmp_path, _row(**big)))
    hw = find_profile(run.hw, profiles)
    judged = {n: predict_run(replace(run, layers=n), hw) for n in range(1, 41)}
    verdicts = [p.memory_verdict for p in judged.values()]
    order = ["fits", "tight", "over"]
    assert verdicts == sorted(verdicts, key=order.index) and set(verdicts) == set(order)
    for p in judged.values():
        assert p.fits_memory == (p.memory_gb <= p.memory_limit_gb) and p.hbm_gb > p.memory_limit_gb
        assert (p.memory_verdict == "over") == (p.memory_gb > p.hbm_gb)
        assert p.describe_memory() == {
            "fits": f"{p.memory_gb:.0f} GB",
            "tight": f"{p.memory_gb:.0f} GB > {p.memory_limit_gb:.0f} GB usable, within {p.hbm_gb:.0f} GB of HBM",
            "over": f"{p.memory_gb:.0f} GB > {p.hbm_gb:.0f} GB of HBM"}[p.memory_verdict]


def test_a_run_is_priced_on_the_cluster_its_row_states(tmp_path, profiles):
    """A quarter of the reference network (2 NICs of 400 Gb/s for 8 GPUs) is the profile with a
    quarter of its scale-out bandwidth per device; a 96 GB variant has a larger usable share;
    blank cells leave the profile as it is."""
    h100 = dict(hw="H100-SXM5-80GB", flash_attention="true", layers="32", hidden="4096", heads="32", seq="4096",
                tp="1", pp="1", dp="64", gpus="64", global_batch="128", micro_batch="1")
    columns = "gpus_per_node,nics_per_node,nic_gbps,hbm_gb,hbm_tbps"
    blank, quarter, variant = read_runs(_with(tmp_path, columns, _row(**h100) + ",,,,,", _row(**h100) + ",,2,400,,",
                                              _row(**h100) + ",,,,96,3.9"))
    hw = find_profile(blank.hw, profiles)
    assert blank.cluster == {} and run_hardware(blank, hw) is hw
    assert quarter.cluster == {"nics_per_node": 2, "nic_gbps": 400.0}
    slow = run_hardware(quarter, hw)
    assert slow.inter_node.bandwidth_GBps == pytest.approx(hw.inter_node.bandwidth_GBps / 4)
    stated = replace(hw, inter_node=replace(hw.inter_node, bandwidth_GBps=hw.inter_node.bandwidth_GBps / 4))
    assert predict_run(quarter, hw).step_time_s == pytest.approx(predict_run(blank, stated).step_time_s)
    assert predict_run(quarter, hw).step_time_s > predict_run(blank, hw).step_time_s
    big = predict_run(variant, hw)
    assert big.hbm_gb == pytest.approx(96 * 2**30 / 1e9) and (run_hardware(variant, hw).hbm_tbps == 3.9)
    for cells, why in ((",0,,,", "nics_per_node='0' must be a finite number of at least 1"),
                       ("1.5,,,,", "gpus_per_node='1.5' must be a whole number"),
                       (",,-400,,", "nic_gbps='-400' must be a finite number of at least 1"),
                       (",,,,0", "hbm_tbps='0' must be a finite number of at least 0.01")):
        with pytest.raises(RowError, match=re.escape(why)):
            read_runs(_with(tmp_path, columns, _row(**h100) + "," + cells))


def test_a_run_on_power_capped_gpus_is_priced_at_their_limit(tmp_path, profiles):
    """A ``power_limit_w`` below the profile's datasheet limit slows the run's compute as
    ``sustained.power_scale`` says; blank or the datasheet's own limit leaves it; a limit the
    profile cannot price is refused naming the column and the value."""
    from tasks.model.kernels.sustained import power_scale

    h100 = dict(hw="H100-SXM5-80GB", flash_attention="true", layers="32", hidden="4096", heads="32", seq="4096",
                tp="1", pp="1", dp="8", gpus="8", global_batch="64", micro_batch="1")
    blank, full, capped = read_runs(_with(tmp_path, "power_limit_w", _row(**h100) + ",", _row(**h100) + ",700",
                                          _row(**h100) + ",450"))
    hw = find_profile(blank.hw, profiles)
    assert run_hardware(blank, hw) is hw and predict_run(full, hw).step_time_s == predict_run(blank, hw).step_time_s
    slow = run_hardware(capped, hw)
    assert slow.power_limit_w == 450 and predict_run(capped, hw).step_time_s > predict_run(blank, hw).step_time_s
    assert predict_run(capped, hw).step_time_s < predict_run(blank, hw).step_time_s / power_scale(slow)
    (low,) = read_runs(_with(tmp_path, "power_limit_w", _row(**h100) + ",150"))
    with pytest.raises(RowError, match=re.escape("power_limit_w=150.0 at or below the 175 W")):
        predict_run(low, hw)
    (a100,) = read_runs(_with(tmp_path, "power_limit_w", _row(**{**h100, "hw": "A100-SXM-80GB"}) + ",300"))
    with pytest.raises(RowError, match="states no datasheet limit"):
        predict_run(a100, find_profile(a100.hw, profiles))


def test_a_row_says_whether_gradients_are_reduced_in_fp32(tmp_path, profiles):
    """Megatron-Core's grad_reduce_in_fp32: off, a bf16 run keeps and reduces 16-bit gradients;
    on, an fp16 run reduces fp32 ones; blank keeps the precision's default."""
    a100 = dict(hw="A100-SXM-80GB", dp="32", gpus="32")
    blank, off, fp16_on = read_runs(_with(tmp_path, "grad_reduce_in_fp32", _row(**a100) + ",",
                                          _row(**a100) + ",false", _row(precision="fp16", **a100) + ",true"))
    assert [run_stack(r).main_grad_bytes for r in (blank, off, fp16_on)] == [4.0, 2.0, 4.0]
    hw = find_profile(blank.hw, profiles)
    assert predict_run(off, hw).step_time_s < predict_run(blank, hw).step_time_s   # half the bytes reduced


def test_a_row_says_whether_the_weight_gather_overlaps_the_next_forward(tmp_path, profiles):
    """param_gather_overlap: true hides a distributed-optimizer run's weight gather behind the
    forward pass (a shorter step); without dp_overlap it is refused naming the column."""
    a100 = dict(hw="A100-SXM-80GB", dp="32", gpus="32", zero="1", flash_attention="true")
    blank, on = read_runs(_with(tmp_path, "param_gather_overlap", _row(**a100) + ",", _row(**a100) + ",true"))
    assert (run_stack(blank).param_gather_overlap, run_stack(on).param_gather_overlap) == (False, True)
    hw = find_profile(blank.hw, profiles)
    assert predict_run(on, hw).step_time_s < predict_run(blank, hw).step_time_s
    with pytest.raises(RowError, match="param_gather_overlap='true' needs dp_overlap true"):
        read_runs(_with(tmp_path, "param_gather_overlap", _row(**{**a100, "dp_overlap": "false"}) + ",true"))


def test_a_row_says_how_its_loss_runs(tmp_path, profiles):
    """cross_entropy: te prices the loss as Transformer Engine's fused kernels (a shorter
    step); blank is Megatron's unfused loss; another name is refused naming the column."""
    h100 = dict(hw="H100-SXM5-80GB", flash_attention="true", vocab="51200")
    blank, te = read_runs(_with(tmp_path, "cross_entropy", _row(**h100) + ",", _row(**h100) + ",te"))
    assert (run_stack(blank).cross_entropy, run_stack(te).cross_entropy) == ("unfused", "te")
    hw = find_profile(blank.hw, profiles)
    assert predict_run(te, hw).step_time_s < predict_run(blank, hw).step_time_s
    with pytest.raises(RowError, match="cross_entropy"):
        read_runs(_with(tmp_path, "cross_entropy", _row(**h100) + ",liger"))


def test_the_zero3_table_is_priced_as_deepspeed_ran_it(tmp_path, profiles):
    """Narayanan et al.'s ZeRO-3 rows ran on DeepSpeed's ZeRO-3 of early 2021: priced as that
    engine ran (one gather per parameter, serialised, again under recomputation, the small
    ones kept gathered), every row comes closer than priced as Megatron's engine (over 60 % too
    fast each), and the lean falls to under a third."""
    runs = read_runs(DATA / "published_runs_zero3.csv")
    assert {run.dp_engine for run in runs} == {"deepspeed-zero3-2021"}
    deepspeed = validate_runs(runs, profiles)
    megatron = validate_runs([replace(run, dp_engine="megatron") for run in runs], profiles)
    assert min(r.error for r in megatron) > 0.60
    assert all(abs(d.error) < m.error for d, m in zip(deepspeed, megatron, strict=True))

    def leaning(records):
        return lean([r.error for r in records], [r.unit for r in records])

    assert abs(leaning(deepspeed)) < leaning(megatron) / 3
    (bad,) = [_row(flash_attention="true") + ",deepspeed"]
    with pytest.raises(RowError, match="row 1: dp_engine='deepspeed' is not one of megatron, deepspeed-zero3-2021, "
                                       "pytorch-fsdp2, xla"):
        read_runs(_with(tmp_path, "dp_engine", bad))


def test_a_head_dim_column_gives_heads_their_own_width(tmp_path, profiles):
    path = tmp_path / "head_dim.csv"
    qwen = dict(hidden="5120", heads="64", kv_heads="8", ffn_hidden="25600", flash_attention="true")
    path.write_text("\n".join([HEADER + ",head_dim", _row(**qwen) + ",", _row(**qwen) + ",128",
                               _row(**dict(qwen, hidden="5000")) + ",128"]) + "\n", encoding="utf-8")
    narrow, wide, uneven = read_runs(path)
    assert (narrow.head_dim, wide.head_dim, run_model(wide).head_dim) == (None, 128, 128)
    hw = find_profile(wide.hw, profiles)
    assert predict_run(wide, hw).step_time_s > predict_run(narrow, hw).step_time_s  # 8,192 columns, not 5,120
    assert uneven.hidden == 5000  # 64 heads need not divide 5,000 columns when they say their width
    path.write_text("\n".join([HEADER + ",head_dim", _row(hidden="5000", heads="64") + ","]) + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="row 1: heads=64 does not divide hidden=5000"):
        read_runs(path)


def test_a_host_launch_us_column_says_whether_the_host_paces_the_device(tmp_path, profiles):
    """A small model at one sequence of 128 tokens a micro-batch: the host's eager launches take
    longer than the device's kernels; a run that replays CUDA graphs (0) keeps the device's time."""
    path = tmp_path / "host.csv"
    tiny = dict(layers="12", hidden="256", heads="4", seq="128", global_batch="32", micro_batch="1",
                flash_attention="true", hw="H100-SXM")
    path.write_text("\n".join([HEADER + ",host_launch_us", _row(**tiny) + ",", _row(**tiny) + ",0"]) + "\n",
                    encoding="utf-8")
    eager, graphs = read_runs(path)
    assert (run_stack(eager).host_launch_us, run_stack(graphs).host_launch_us) == (53.0, 0.0)
    hw = find_profile(eager.hw, profiles)
    assert predict_run(eager, hw).step_time_s > 2 * predict_run(graphs, hw).step_time_s
    path.write_text("\n".join([HEADER + ",host_launch_us", _row() + ",-1"]) + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="row 1: host_launch_us='-1'"):
        read_runs(path)


def test_a_latent_attention_row_is_read_and_one_without_its_head_width_refused(tmp_path, profiles):
    mla = ",head_dim,kv_lora_rank,q_lora_rank,qk_rope_head_dim,v_head_dim"
    path = tmp_path / "mla.csv"
    path.write_text("\n".join([HEADER + mla, _row() + ",128,512,1536,64,128"]) + "\n", encoding="utf-8")
    [run] = read_runs(path)
    assert (run.kv_lora_rank, run.q_lora_rank, run.qk_rope_head_dim, run.v_head_dim) == (512, 1536, 64, 128)
    assert validate_all(profiles, DATA, runs_file=path, datasets=("runs",)).records[0].predicted > 0
    path.write_text("\n".join([HEADER + mla, _row() + ",,512,,,"]) + "\n", encoding="utf-8")
    with pytest.raises(RowError, match="row 1.*kv_lora_rank"):
        read_runs(path)


def test_a_projections_column_runs_torchtitans_input_projections_apart(tmp_path, profiles):
    """projections: blank is fused (Megatron-Core's linear_qkv and linear_fc1); separate runs
    each as its own product (torchtitan's wq, wk, wv and w1, w3), dearer; another word is refused
    in one line naming the column. The held-out torchtitan, Trainy and MaxText rows name it."""
    llama = dict(hidden="4096", heads="32", kv_heads="8", ffn_hidden="14336", flash_attention="true", tp="8", dp="4",
                 sequence_parallel="true")
    fused, apart = read_runs(_with(tmp_path, "projections", _row(**llama) + ",", _row(**llama) + ",separate"))
    assert (fused.projections, apart.projections) == ("fused", "separate")
    hw = find_profile(fused.hw, profiles)
    assert predict_run(apart, hw).step_time_s > predict_run(fused, hw).step_time_s
    with pytest.raises(RowError, match="row 1: projections='apart' is not one of fused, separate"):
        read_runs(_with(tmp_path, "projections", _row(**llama) + ",apart"))
    held_out = read_runs(DATA / "holdout_runs.csv")
    assert {run.source for run in held_out if run.projections == "separate"} == \
        {"torchtitan2412", "torchtitan2506_asynctp", "trainy2506_h200", "maxtext2404_a3", "dgxc2502_maxtext"}


def test_an_fp8_recipe_is_read_and_refused_where_it_cannot_be(tmp_path):
    h100 = dict(hw="H100-SXM5-80GB", flash_attention="true")
    blank, stated = read_runs(_with(tmp_path, "fp8_recipe", _row(precision="fp8", **h100) + ",",
                                    _row(precision="fp8", **h100) + ",tensorwise"))
    assert (run_stack(blank).fp8_recipe, run_stack(stated).fp8_recipe) == ("delayed", "tensorwise")
    refused = {"fp8_recipe='tensorwise' needs precision fp8, not bf16": _row(**h100) + ",tensorwise",
               "fp8_recipe='current'": _row(precision="fp8", **h100) + ",current"}
    for why, row in refused.items():
        with pytest.raises(RowError, match=f"row 1: {re.escape(why)}"):
            read_runs(_with(tmp_path, "fp8_recipe", row))
