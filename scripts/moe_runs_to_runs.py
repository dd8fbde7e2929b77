"""Megatron-Bridge's published mixture-of-experts runs (conf/data/moe_runs.csv) as a runs file
``commscale validate --runs`` reads (the columns of conf/data/published_runs.csv with the
mixture-of-experts ones, ``tasks.validation.run_moe``).

    python scripts/moe_runs_to_runs.py [--out conf/data/moe_bridge_runs.csv]

Rows on hardware a profile describes (H100, B200, GB200, B300, GB300: every row) are kept,
each with its layout and shapes as moe_runs.csv gives them and these readings of its recipe
columns, the same for every row (no row is special-cased):

- precision: BF16 is bf16, every FP8 recipe fp8, with its scaling as fp8_recipe (Megatron-Core's
  names, the ones Megatron-Bridge's mixed-precision recipes set: FP8-CS, per-tensor current
  scaling, is tensorwise; FP8-MX mxfp8; FP8-blockwise blockwise);
- sequence parallel wherever TP > 1 (Megatron-Core requires it of MoE under TP); fused
  attention, a gated MLP and no dropout (every one of these models); the distributed optimizer
  (zero1) with its gather and the gradient reduction overlapped, and the pipeline's sends
  where VP > 1 (Megatron-Bridge's comm_overlap defaults); Transformer Engine's cross entropy;
- recompute: "none" or blank is none, any selective list is selective (an approximation: the
  step model's selective recomputation repeats the attention core's forward, Megatron-Core's
  default module, while these recipes name others, "layernorm+moe_act", "mla_up_proj", "mlp");
- dispatcher: "flex/..." (DeepEP, HybridEP) is flex, else alltoall; "a2a_overlap" turns
  moe_a2a_overlap on; the SMs the flex dispatcher's kernels hold (dispatcher_sms): DeepEP
  Megatron-Core's default 20 (moe_deepep_num_sms; no performance script sets it), HybridEP the
  32 Megatron-Bridge's performance scripts give it (moe_hybridep_num_sms,
  scripts/performance/utils/overrides.py at v0.4.0 to v0.5.1, perf_recipes/_common.py at
  v0.6.0); a "tokendrop" recipe states its capacity factor (validate skips it);
- CUDA graphs: Transformer Engine's per-layer graphs of some scopes
  ("transformer_engine:attn+moe_router+moe_preprocess") replay those parts and leave the rest
  eager: cuda_graph_scope the scopes, the host's launch path the measured default; a graph of
  the whole iteration or layer ("full_iteration", "enable_cuda_graph=true") replays every
  kernel: host_launch_us 0;
- shared_experts: the count before the width in "1 (2048)"; the metric's name as runs files
  spell it (tokens_per_s_per_gpu, model_tflops_per_gpu);
- the experts' MLP as Transformer Engine's fused operations (moe_fused_mlp) where the recipe
  turns Megatron-Core's op fuser on: "cutedsl_fused_grouped_mlp" (Megatron-Bridge's override
  sets use_transformer_engine_op_fuser, scripts/performance/utils/overrides.py at v0.5.0) or
  "te_op_fuser" in the dispatcher cell;
- GPT-OSS's experts (every GPT-OSS row: the model's, not the run's) carry biases and clamp
  their gated activation's inputs to 7.0 (openai/gpt-oss-120b config.json: swiglu_limit 7.0;
  its experts' gate_up_proj_bias and down_proj_bias): expert_bias, expert_clamp;
- the pipeline's split (pipeline_split): embedding+loss for the models whose pretraining
  recipe, which every performance config of the model starts from, counts the embedding and
  the loss as layers (account_for_embedding_in_pipeline_split and
  account_for_loss_in_pipeline_split): Qwen3-235B-A22B (qwen3_235b_a22b_pretrain_config,
  src/megatron/bridge/recipes/qwen/qwen3_moe.py at v0.2.0 to v0.5.1, the same name for
  recipes/qwen/h100/qwen3_moe.py's 256-GPU config at v0.6.0; 94 layers and 2 divide every PP x
  VP its rows run, 94 alone none); layers for the others;
- multi-head latent attention where the notes give its dimensions ("MLA: q_lora_rank=1536
  kv_lora_rank=512 qk_nope_head_dim=128 qk_rope_head_dim=64 v_head_dim=128"): the latents'
  widths, head_dim the non-rotary query/key width, the rotary part and the value width.
The derived file's notes keep the source row's table line and recipe.
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

from tasks.model.terms.stack import DEEPEP_SMS, HYBRIDEP_SMS

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "conf" / "data" / "moe_runs.csv"
TARGET = ROOT / "conf" / "data" / "moe_bridge_runs.csv"
PROFILED = ("H100", "B200", "GB200", "B300", "GB300")
COLUMNS = ("source", "model", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "gated_mlp", "vocab",
           "experts", "topk", "moe_ffn_hidden", "shared_experts", "dense_layers", "seq", "global_batch", "micro_batch",
           "gpus", "tp", "pp", "vp", "cp", "ep", "etp", "dp", "zero", "recompute", "sequence_parallel",
           "flash_attention", "dp_overlap", "pp_overlap", "param_gather_overlap", "cross_entropy", "dropout",
           "precision", "fp8_recipe", "dispatcher", "moe_a2a_overlap", "dispatcher_sms", "capacity_factor",
           "host_launch_us", "cuda_graph_scope", "pipeline_split",
           "moe_fused_mlp", "expert_bias", "expert_clamp",
           "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "hw", "metric", "value", "confidence",
           "notes")


def _flag(on: bool) -> str:
    return "true" if on else "false"


MLA = re.compile(r"MLA: q_lora_rank=(\d+) kv_lora_rank=(\d+) qk_nope_head_dim=(\d+) qk_rope_head_dim=(\d+) "
                 r"v_head_dim=(\d+)")


def _latent(row: dict) -> dict:
    """The row's latent-attention columns from its notes (blank without them)."""
    found = MLA.search(row["notes"])
    if not found:
        return {"kv_lora_rank": "", "q_lora_rank": "", "qk_rope_head_dim": "", "v_head_dim": ""}
    q_lora, kv_lora, nope, rope, v = found.groups()
    return {"kv_lora_rank": kv_lora, "q_lora_rank": q_lora, "qk_rope_head_dim": rope, "v_head_dim": v,
            "head_dim": nope}


#: The models whose experts carry biases and clamp their activation, with the clamp's bound
#: (openai/gpt-oss-120b config.json: swiglu_limit).
CLAMPED_BIASED_EXPERTS = {"GPT-OSS-120B": "7.0"}
#: What in a dispatcher cell says the recipe runs Megatron-Core's op fuser.
OP_FUSER_MARKS = ("cutedsl_fused_grouped_mlp", "te_op_fuser")

#: The models whose recipe counts the embedding and the loss as layers in the pipeline's split
#: (the module docstring).
SPLIT_EMBEDDING_AND_LOSS = ("Qwen3-235B-A22B",)

#: How moe_runs.csv names Transformer Engine's per-layer graphs of some scopes.
PER_LAYER_GRAPHS = "transformer_engine:"


def _graphs(text: str) -> dict:
    """The host's launch path and the graphed scopes of a run's ``cuda_graphs`` cell."""
    graphs = text.strip().lower()
    if graphs in ("", "none"):
        return {"host_launch_us": "", "cuda_graph_scope": ""}
    if graphs.startswith(PER_LAYER_GRAPHS):
        return {"host_launch_us": "", "cuda_graph_scope": graphs[len(PER_LAYER_GRAPHS):].strip()}
    return {"host_launch_us": "0", "cuda_graph_scope": ""}


#: The SMs each flex backend's kernels hold (the module docstring): DEEPEP_SMS and HYBRIDEP_SMS.
BACKEND_SMS = {"flex/deepep": DEEPEP_SMS, "flex/hybridep": HYBRIDEP_SMS}


def _dispatcher_sms(dispatch: str) -> str:
    """The SMs of the row's flex backend ("flex/deepep...", "flex/hybridep..."); blank for NCCL's all-to-all."""
    return next((str(sms) for backend, sms in BACKEND_SMS.items() if dispatch.startswith(backend)), "")


#: The table's fp8 precisions and their recipes (``Stack.fp8_recipe``).
FP8_RECIPE_OF = {"FP8-CS": "tensorwise", "FP8-MX": "mxfp8", "FP8-BLOCKWISE": "blockwise"}


def runs_row(row: dict) -> dict:
    """One moe_runs.csv row as a runs-file row (the module docstring's readings)."""
    tp, vp = int(row["tp"]), int(row["vp"] or 1)
    dispatch = row["dispatcher"]
    drop = re.search(r"capacity_factor=([0-9.]+)", dispatch) if "tokendrop" in dispatch else None
    metric = {"tokens_per_sec_per_gpu": "tokens_per_s_per_gpu"}.get(row["metric"], row["metric"])
    return {
        "source": row["source"], "model": row["model"], "layers": row["layers"], "hidden": row["hidden"],
        "heads": row["heads"], "kv_heads": row["kv_heads"], "head_dim": row["head_dim"],
        "ffn_hidden": row["ffn_hidden"], "gated_mlp": "true", "vocab": row["vocab"], "experts": row["experts"],
        "topk": row["topk"], "moe_ffn_hidden": row["moe_ffn_hidden"],
        "shared_experts": (re.match(r"\s*(\d+)", row["shared_experts"] or "0") or re.match("", "0")).group(0).strip()
        or "0",
        "dense_layers": row["dense_layers"] or "0", "seq": row["seq"], "global_batch": row["global_batch"],
        "micro_batch": row["micro_batch"], "gpus": row["gpus"], "tp": row["tp"], "pp": row["pp"], "vp": str(vp),
        "cp": row["cp"] or "1", "ep": row["ep"] or "1", "etp": row["etp"] or "1", "dp": row["dp"], "zero": "zero1",
        "recompute": "selective" if row["recompute"].startswith("selective") else "none",
        "sequence_parallel": _flag(tp > 1), "flash_attention": "true", "dp_overlap": "true",
        "pp_overlap": _flag(vp > 1), "param_gather_overlap": "true", "cross_entropy": "te", "dropout": "0",
        "precision": "bf16" if row["precision"].upper() == "BF16" else "fp8",
        "fp8_recipe": FP8_RECIPE_OF.get(row["precision"].upper(), ""),
        "dispatcher": "flex" if dispatch.startswith("flex") else "alltoall",
        "moe_a2a_overlap": _flag("a2a_overlap" in dispatch), "dispatcher_sms": _dispatcher_sms(dispatch),
        "capacity_factor": drop.group(1) if drop else "",
        "moe_fused_mlp": _flag(any(mark in dispatch for mark in OP_FUSER_MARKS)),
        "expert_bias": _flag(row["model"] in CLAMPED_BIASED_EXPERTS),
        "expert_clamp": CLAMPED_BIASED_EXPERTS.get(row["model"], ""),
        **_graphs(row["cuda_graphs"]), "hw": row["hw"], "metric": metric,
        "pipeline_split": "embedding+loss" if row["model"] in SPLIT_EMBEDDING_AND_LOSS else "layers",
        "value": row["value"], "confidence": row["confidence"],
        "notes": f"from conf/data/moe_runs.csv ({row['source']} {row['model']} {row['hw']} {row['precision']}): "
                 + row["notes"].split(" | ")[0],
        **_latent(row),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TARGET)
    args = parser.parse_args()
    with SOURCE.open(newline="", encoding="utf-8") as f:
        rows = [runs_row(r) for r in csv.DictReader(f) if r["hw"] in PROFILED]
    with args.out.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
