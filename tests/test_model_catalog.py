"""The kit's catalog of model configs (kit/data/model_configs/) and config_for(): each entry is a real
hub config with its source, a launch's --model-path in its usual shapes finds it, and the doctor uses it
when no config.json was given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.model_config import CATALOG_DIR, HUB_ENV, catalog, catalog_miss, config_for

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = sorted(CATALOG_DIR.glob("*.json"))


@pytest.fixture(autouse=True)
def _no_hub(monkeypatch):
    monkeypatch.setenv(HUB_ENV, "0")


def _text(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg


def test_the_catalog_has_at_least_40_models_and_says_what_it_lacks():
    assert len(catalog()) >= 40 and len(ENTRIES) == len(catalog())
    readme = (CATALOG_DIR / "README.md").read_text()
    assert "not in the catalog" in readme and "Qwen3.6-27B" in readme


@pytest.mark.parametrize("path", ENTRIES, ids=lambda p: p.stem)
def test_each_entry_has_its_source_and_the_fields_its_model_type_needs(path):
    cfg = json.loads(path.read_text())
    model_id = path.stem.replace("--", "/", 1)
    assert cfg["_source"][0] == f"https://huggingface.co/{model_id}/blob/main/config.json"
    assert len(cfg["_source"]) >= 2  # and the public copy it was read from
    assert cfg["architectures"] and cfg["model_type"]
    text = _text(cfg)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        assert isinstance(text.get(key), int), key
    if "kv_lora_rank" in text:  # MLA
        for key in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts", "num_experts_per_tok"):
            assert isinstance(text.get(key), int), key
    else:
        assert isinstance(text.get("num_key_value_heads"), int)
        assert text["num_attention_heads"] % text["num_key_value_heads"] == 0
    if "moe" in text["model_type"] or text["model_type"] in ("mixtral", "gpt_oss", "llama4_text"):
        assert any(isinstance(text.get(k), int) for k in ("num_experts", "num_local_experts", "n_routed_experts"))
        assert isinstance(text.get("num_experts_per_tok"), int)
    if "linear_attention" in (text.get("layer_types") or []):  # hybrid linear attention
        assert len(text["layer_types"]) == text["num_hidden_layers"]
        for key in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"):
            assert isinstance(text.get(key), int), key


def test_the_config_handed_out_is_the_entry_without_the_catalogs_own_keys():
    cfg, source = config_for("Qwen/Qwen3-32B")
    assert not [k for k in cfg if k.startswith("_")]
    assert (cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == \
        (64, 64, 8, 128)
    assert source == ("the kit's catalog: Qwen/Qwen3-32B "
                      "(https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json)")


@pytest.mark.parametrize("model", [
    "Qwen/Qwen3-32B", "qwen/qwen3-32b", "/models/Qwen3-32B", "/models/Qwen3-32B/", "/data/hf/Qwen--Qwen3-32B",
    "/mnt/Model/Qwen/Qwen3-32B", "~/.cache/huggingface/hub/models--Qwen--Qwen3-32B/snapshots/0123abcd",
    "/root/.cache/huggingface/hub/models--Qwen--Qwen3-32B",
])
def test_a_model_path_in_its_usual_shapes_finds_the_entry(model):
    cfg, source = config_for(model)
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["hidden_size"] == 5120
    assert source.startswith("the kit's catalog: Qwen/Qwen3-32B ")


def test_a_name_several_orgs_share_is_not_guessed_but_an_instruct_is_not_its_base():
    assert config_for("/models/Qwen2.5-7B")[0]["max_position_embeddings"] == 131072
    assert config_for("/models/Qwen2.5-7B-Instruct")[0]["max_position_embeddings"] == 32768


@pytest.mark.parametrize("model,base,quant", [
    ("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-32B", "FP8"),
    ("Qwen/Qwen3-30B-A3B-GPTQ-Int4", "Qwen/Qwen3-30B-A3B", "GPTQ-INT4"),
    ("/models/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct", "AWQ"),
    ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8", None, None),
])
def test_a_quantized_copy_gets_its_base_config_and_says_what_is_not_its_own(model, base, quant):
    hit = config_for(model)
    if base is None:  # Meta-Llama-3.1-70B-Instruct is not the catalog's name for the model: no guess
        assert hit is None
        return
    cfg, source = hit
    assert source.startswith(f"the kit's catalog: {base} ")
    assert f"this {quant} checkpoint's own quantization_config" in source and "--model-config" in source


def test_a_quantized_checkpoint_in_the_catalog_is_itself():
    cfg, source = config_for("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic")
    assert cfg["quantization_config"] and "base model" not in source


@pytest.mark.parametrize("model", ["foo/bar", "/models/my-finetune", "Qwen/Qwen3.6-27B", "", None])
def test_an_unknown_model_is_none_and_the_line_says_what_the_catalog_has(model):
    assert config_for(model) is None
    if model:
        line = catalog_miss(model)
        assert f"has no entry for {model}" in line and "Qwen3" in line and "kit/data/model_configs/" in line


def test_without_huggingface_hub_or_a_network_the_catalog_answers_and_says_why(monkeypatch):
    monkeypatch.setenv(HUB_ENV, "1")
    import kit.model_config as mc

    monkeypatch.setattr(mc, "_from_hub", lambda model, timeout: (None, "the hub did not answer (ConnectionError)"))
    cfg, source = config_for("Qwen/Qwen3-8B")
    assert cfg["num_hidden_layers"] == 36
    assert source.endswith("; the hub did not answer (ConnectionError)")
    assert config_for("Qwen/Qwen3-8B", hub=False)[1].endswith("config.json)")


def test_the_doctor_on_a_real_incident_without_config_json_reads_the_catalog():
    """sglang#7212: the launch names /mnt/Model/Qwen/Qwen3-30B-A3B and the post has no config.json."""
    import yaml

    import kit.doctor

    case = ROOT / "data" / "incidents" / "sglang-7212-script-cut-server-args"
    data = yaml.safe_load((case / "case.yaml").read_text())
    files = list(dict.fromkeys(str(case / item["file"]) for item in data["evidence"]))
    ev = kit.doctor.from_files(paste=files, sglang=data.get("reader_version"))
    assert ev.sources["model_config"] == ("the kit's catalog: Qwen/Qwen3-30B-A3B "
                                          "(https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json)")
    assert (ev.model_config["num_experts"], ev.model_config["num_experts_per_tok"]) == (128, 8)
    assert not [p for p in ev.problems if "no model config.json" in p]


def test_the_doctor_on_the_projects_incident_names_what_the_catalog_lacks():
    """Qwen3.6-27B has no real config.json in the catalog: the line asks for --model-config and says so."""
    import kit.doctor

    ev = kit.doctor.from_files(paste=[str(ROOT / "tests" / "data" / "paste" / "incident-issue.md")])
    assert ev.model_config is None
    [line] = [p for p in ev.problems if "no model config.json" in p]
    assert "--model-config FILE" in line and "catalog of" in line and "no entry for /root/models/Qwen3.6-27B" in line


def test_model_config_wins_over_the_catalog(tmp_path):
    import kit.doctor

    mine = tmp_path / "config.json"
    mine.write_text(json.dumps({"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 2}))
    case = ROOT / "data" / "incidents" / "sglang-7212-script-cut-server-args"
    ev = kit.doctor.from_files(paste=[str(case / "issue.md")], model_config=str(mine), sglang="0.4.6.post5")
    assert ev.model_config["num_hidden_layers"] == 2 and ev.sources["model_config"] == str(mine)
