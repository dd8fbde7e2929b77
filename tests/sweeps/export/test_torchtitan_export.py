"""``--export torchtitan``: every key of its TOML is a field of torchtitan's own job config,
with a value of its type (one of its choices), and the TOML says the layout back (TP, PP,
DP and how it shards, virtual stages and the split of the layers, micro- and global batch,
recomputation); a layout torchtitan cannot express is refused in one line."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from typing import Dict, List, Tuple

import pytest

from sweeps.export import Unexpressible, export
from sweeps.export.case import chunk_split
from tasks.model.terms.layout import Layout

#: Where the keys come from: the dataclasses of torchtitan's job config (the last release
#: configured by TOML).
SOURCE = {"repository": "pytorch/torchtitan", "release": "v0.2.2", "commit": "73a0e6979dd10b6b1904098eb3c8f62c18ab87ce",
          "path": "torchtitan/config/job_config.py"}
#: The keys of torch.distributed.pipelining.schedules.get_schedule_class's schedule_map, to
#: which pipeline_parallel_schedule's docstring points (pytorch/pytorch@de4c2a3b): the two used.
SCHEDULES = ("1F1B", "Interleaved1F1B")
#: torchtitan/components/quantization/float8.py: register_model_converter(..., "quantize.linear.float8").
CONVERTERS = ("quantize.linear.float8",)
#: Section -> key -> type, or a tuple of the values a Literal takes (class and line of ``SOURCE``).
KEYS: Dict[str, Dict[str, object]] = {
    "training": {"local_batch_size": int, "global_batch_size": int, "seq_len": int,  # class Training
                 "mixed_precision_param": ("bfloat16", "float32"), "mixed_precision_reduce": ("float32",)},
    "parallelism": {"data_parallel_replicate_degree": int, "data_parallel_shard_degree": int,  # class Parallelism
                    "fsdp_reshard_after_forward": ("default", "always", "never"), "tensor_parallel_degree": int,
                    "enable_async_tensor_parallel": bool, "pipeline_parallel_degree": int,
                    "pipeline_parallel_layers_per_stage": int, "pipeline_parallel_first_stage_less_layers": int,
                    "pipeline_parallel_last_stage_less_layers": int, "pipeline_parallel_schedule": SCHEDULES,
                    "pipeline_parallel_microbatch_size": int, "context_parallel_degree": int},
    "activation_checkpoint": {"mode": ("selective", "full", "memory_budget", "none"),  # class ActivationCheckpoint
                              "selective_ac_option": ("op",)},
    "compile": {"enable": bool, "components": list},  # class Compile
    "model": {"converters": list},  # class Model
}


def parse(text: str) -> Dict[str, Dict[str, object]]:
    """The TOML, each key checked against ``KEYS``."""
    config = tomllib.loads(text)
    for section, keys in config.items():
        for key, value in keys.items():
            kind = KEYS[section][key]
            if isinstance(kind, tuple):
                assert value in kind, (section, key, value)
            else:
                assert isinstance(value, kind) and (kind is bool or not isinstance(value, bool)), (section, key)
    assert set(config["model"]["converters"]) <= set(CONVERTERS)
    return config


def layout_of(config: Dict[str, Dict[str, object]], layers: int) -> Tuple[Layout, List[int]]:
    """The layout the TOML describes and the layers of each stage, split as torchtitan's
    ``generate_llm_fqn_per_model_part`` splits them (torchtitan/distributed/pipeline_parallel.py:
    layers // stages each, the extra ones on the first stages, none taken off the first and last)."""
    par, training = config["parallelism"], config["training"]
    tp, pp = par["tensor_parallel_degree"], par["pipeline_parallel_degree"]
    replicate, shard = par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]
    dp = replicate * shard
    zero = "none" if shard == 1 else "zero3" if replicate == 1 else "hsdp"    # HSDP: a 2-D mesh
    if pp > 1:
        assert (par["pipeline_parallel_first_stage_less_layers"], par["pipeline_parallel_last_stage_less_layers"]) \
            == (0, 0)
        stages = math.ceil(layers / par["pipeline_parallel_layers_per_stage"]) \
            if par["pipeline_parallel_schedule"] == "Interleaved1F1B" else pp
        micro_batch = par["pipeline_parallel_microbatch_size"]
        assert training["local_batch_size"] * dp == training["global_batch_size"]  # one accumulation step
    else:
        stages, micro_batch = 1, training["local_batch_size"]
    split = [layers // stages + (i < layers % stages) for i in range(stages)]
    return Layout(tp=tp, pp=pp, dp=dp, micro_batch=micro_batch,
                  schedule="interleaved" if stages > pp else "1f1b", virtual_stages=stages // pp,
                  zero=zero, sequence_parallel=tp > 1,
                  recompute=_recompute(config["activation_checkpoint"])), split


def _recompute(section: Dict[str, object]) -> str:
    """The layout's recompute of ``[activation_checkpoint]``: torchtitan's selective mode by op
    (``_apply_op_sac``) is ``op``; none and full are themselves."""
    if section["mode"] == "selective":
        assert section["selective_ac_option"] == "op"
        return "op"
    assert "selective_ac_option" not in section
    return str(section["mode"])


def test_every_feasible_layout_round_trips_through_torchtitans_own_keys_or_is_refused_in_one_line(exports):
    exported = []
    for label, case, text in exports("torchtitan"):
        config = parse(text)
        layout, split = layout_of(config, case.model.layers)
        assert layout == dataclasses.replace(case.layout, zero=case.sharding,
                                             sequence_parallel=case.sequence_parallel), (label, case.layout)
        assert split == chunk_split(case)
        assert config["training"]["global_batch_size"] == case.global_batch
        assert config["parallelism"]["enable_async_tensor_parallel"] == (case.stack.tp_overlap and case.layout.tp > 1)
        assert bool(config["model"]["converters"]) == case.stack.fp8
        exported.append(case)
        if case.sharding == "hsdp":
            assert config["parallelism"]["data_parallel_shard_degree"] == case.hardware.devices_per_node
    assert {case.sharding for case in exported} == {"none", "zero3", "hsdp"}
    assert {case.layout.recompute for case in exported} == {"none", "full", "op"}
    assert any(case.layout.pp > 1 for case in exported) and any(case.layout.tp > 1 for case in exported)


@pytest.mark.parametrize("label, zero, why", [
    ("core-2024", "zero1", "zero1"),
    ("core-2024", "fsdp", "zero=fsdp"),
    ("2022", "zero3", "materialised attention"),
])
def test_what_torchtitan_lacks_is_refused_naming_it(cases, label, zero, why):
    case = next(case for setup, case in cases if setup == label and case.layout.dp > 1 and case.layout.pp == 1
                and case.layout.tp == 1 and case.layout.recompute == "none")
    with pytest.raises(Unexpressible, match=why):
        export("torchtitan", dataclasses.replace(case, layout=dataclasses.replace(case.layout, zero=zero)))


@pytest.mark.parametrize("label", ["cp-ring", "cp-gather", "cp-a2a"])
def test_context_parallelism_is_refused_as_torchtitan_exchanges_kv_otherwise(built_cases, label):
    with pytest.raises(Unexpressible, match=r"CP \d \((p2p|all_gather|a2a)\): torchtitan's context parallelism"):
        export("torchtitan", dict(built_cases)[label])


def test_a_named_flashattention_kernel_is_refused_as_the_export_does_not_choose_sdpas(built_cases):
    with pytest.raises(Unexpressible, match="stack.attention_impl='flash2'"):
        export("torchtitan", dict(built_cases)["flash2"])


def test_hybrid_sharding_over_several_micro_batches_is_refused(built_cases):
    """torchtitan's HSDP reduces every micro-batch; the layout reduces once per step."""
    case = dict(built_cases)["hsdp"]
    with pytest.raises(Unexpressible, match="zero=hsdp over 2 micro-batches"):
        export("torchtitan", dataclasses.replace(case, global_batch=2 * case.global_batch))


def test_a_layout_costed_on_fsdp2_exports_to_torchtitan(cases):
    """FSDP2 (the pytorch-fsdp2 engine) is what torchtitan runs for ZeRO-3: exported, not refused."""
    case = next(case for setup, case in cases if setup == "core-2024" and case.layout.zero == "zero3"
                and case.layout.pp == 1 and case.layout.dp > 1)
    fsdp2 = dataclasses.replace(case, stack=dataclasses.replace(case.stack, dp_engine="pytorch-fsdp2"))
    config = parse(export("torchtitan", fsdp2))
    assert config["parallelism"]["data_parallel_shard_degree"] == case.layout.dp


def test_heads_of_their_own_width_are_refused_as_torchtitans_llama_derives_them(built_cases):
    with pytest.raises(Unexpressible, match="heads 128 wide"):
        export("torchtitan", dict(built_cases)["head-dim"])


def test_torchtitans_uncompiled_block_and_per_op_recomputation_export_as_its_settings(built_cases):
    case = dict(built_cases)["op"]
    eager = dataclasses.replace(case, stack=dataclasses.replace(case.stack, elementwise="llama_eager"))
    config = parse(export("torchtitan", eager))
    assert config["compile"]["enable"] is False
    compiled = dataclasses.replace(case, stack=dataclasses.replace(case.stack, elementwise="llama_compiled"))
    assert parse(export("torchtitan", compiled))["compile"]["enable"] is True
    assert config["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
