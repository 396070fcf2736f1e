"""Every entry point resolves one case to one Decoding (river_cpp.decoding.decision).

The cases: preset x (--tau / --exit-layer / --policy / none) x --draft (each value,
or not given) x (--river none, or the preset's river). The entry points: the CLI's
generate, chat and serve (what `river-cpp serve` makes the served model's default);
the API (a RiverModel holding the preset's defaults, then generate /
create_completion / create_chat_completion's per-call options); and the server's
request parser (a `river` field on a server started with the preset alone). Where the
command line refuses a case (a draft named for a decode that does not draft, a river
draft or an exit without a river) every command refuses it.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from river_cpp import RiverModel
from river_cpp.apps.cli import parser
from river_cpp.apps.cli.generate import cli_decoding, open_model
from river_cpp.apps.server.protocol import APIError, parse_request
from river_cpp.decoding.decision import SAMPLING_DEFAULTS
from river_cpp.decoding.presets import PRESETS
from river_cpp.decoding.sampling import SamplingParams
from river_cpp.decoding.speculative_options import DRAFTS, Speculative
from river_cpp.engine.compute.policy import ExitPolicy

TAU, EXIT_LAYER = 0.95, 1
SAVED = ExitPolicy.uniform(0.97, min_layer=1)
EXITS = ("none", "tau", "exit-layer", "policy")
CASES = list(itertools.product(PRESETS, EXITS, (None, *DRAFTS, "none"), (False, True)))


def case_id(case) -> str:
    preset, exit_option, draft, no_river = case
    return f"{preset}-{exit_option}-draft={draft}-{'no river' if no_river else 'river'}"


@pytest.fixture(scope="module")
def env(tiny_llama4: Path, tmp_path_factory):
    """The tiny model, a saved policy, a river cache for the module, and the models
    holding each (preset, river) pair's defaults, opened as the API and as `serve` do."""
    folder = tmp_path_factory.mktemp("decoding_entries")
    policy_file = folder / "policy.json"
    SAVED.save(policy_file)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIVER_CPP_CACHE_DIR", str(folder / "cache"))
        models: dict = {}
        try:
            yield {"path": tiny_llama4, "policy_file": policy_file, "models": models}
        finally:
            for model in models.values():
                model.close()


def argv(command: str, case, env) -> list[str]:
    preset, exit_option, draft, no_river = case
    args = [command, *(["Hello"] if command == "generate" else []), "--model", str(env["path"]), "--preset", preset]
    args += {
        "none": [],
        "tau": ["--tau", str(TAU)],
        "exit-layer": ["--exit-layer", str(EXIT_LAYER)],
        "policy": ["--policy", str(env["policy_file"])],
    }[exit_option]
    args += ["--draft", draft] if draft is not None else []
    args += ["--river", "none"] if no_river else []
    return args + ["--n-ctx", "64", "-t", "1"]


def command_line(command: str, case, env, *, kind: str = "generate"):
    """(the command's Decoding, or the ValueError's message; its parsed arguments)."""
    args = parser().parse_args(argv(command, case, env))
    try:
        return cli_decoding(args, kind=kind), args
    except ValueError as error:
        return str(error), args


def api_model(env, preset_name: str, no_river: bool) -> RiverModel:
    """A RiverModel holding the preset's defaults, as a user of the API writes them."""
    key = ("api", preset_name, no_river)
    if key not in env["models"]:
        preset = PRESETS[preset_name]
        env["models"][key] = RiverModel(
            env["path"],
            river=None if no_river else preset.river,
            river_head=None if no_river else preset.river_head,
            prefill=preset.prefill,
            policy=None if no_river else preset.policy,
            speculative=None if preset.speculative else False,
            n_ctx=64,
            n_threads=1,
            progress=False,
        )
    return env["models"][key]


def served_model(env, preset_name: str, no_river: bool) -> RiverModel:
    """The model `river-cpp serve --preset P [--river none]` serves."""
    key = ("serve", preset_name, no_river)
    if key not in env["models"]:
        case = (preset_name, "none", None, no_river)
        chosen, args = command_line("serve", case, env)
        env["models"][key] = open_model(args, chosen)
    return env["models"][key]


def api_options(case, env) -> dict:
    """The case as generate()'s / create_*completion()'s per-call options."""
    preset, exit_option, draft, _ = case
    policy = {
        "none": None,
        "tau": ExitPolicy.uniform(TAU, min_layer=PRESETS[preset].min_layer),
        "exit-layer": ExitPolicy.at_layer(EXIT_LAYER),
        "policy": ExitPolicy.load(env["policy_file"]),
    }[exit_option]
    speculative = None if draft is None else False if draft == "none" else Speculative(draft=draft)
    return {"policy": policy, "speculative": speculative}


def river_field(case, env):
    """The case as a request's `river` field (None: none; a draft cannot be named there)."""
    preset, exit_option, draft, _ = case
    field = {
        "none": {},
        "tau": {"tau": TAU, "min_layer": PRESETS[preset].min_layer},
        "exit-layer": {"exit_layer": EXIT_LAYER},
        "policy": {"policy": json.loads(env["policy_file"].read_text())},
    }[exit_option]
    if draft == "none":
        field["speculative"] = False
    return field or None


def route(decoding) -> tuple:
    """What decides the tokens and the draft (sampling is each entry kind's own)."""
    return decoding.policy, decoding.speculative


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_entry_point_resolves_the_case_alike(case, env):
    preset, exit_option, draft, no_river = case
    generate, _ = command_line("generate", case, env)
    chat, _ = command_line("chat", case, env, kind="repl")
    serve, _ = command_line("serve", case, env)
    if isinstance(generate, str):  # refused: by every command, with the same reason
        assert chat == serve == generate
        assert "river" in generate or "does not draft" in generate
        return
    assert route(chat) == route(serve) == route(generate)
    assert generate.sampling == SAMPLING_DEFAULTS["generate"] and chat.sampling == SAMPLING_DEFAULTS["repl"]

    model = api_model(env, preset, no_river)
    for kind in ("generate", "completion", "chat"):
        decoding = model.decoding(kind, **api_options(case, env))
        assert route(decoding) == route(generate), kind
        assert decoding.sampling == SAMPLING_DEFAULTS[kind]

    if draft not in (None, "none"):
        return  # a request cannot name a draft
    served = served_model(env, preset, no_river)
    assert route(served.decoding()) == route(command_line("serve", (preset, "none", None, no_river), env)[0])
    field = river_field(case, env)
    bodies = [{"prompt": "x", "river": field}] + ([{"prompt": "x"}] if field is None else [])
    for body in bodies:
        for chat_endpoint in (False, True):
            if chat_endpoint:
                body = {
                    "messages": [{"role": "user", "content": "x"}],
                    **{k: v for k, v in body.items() if k != "prompt"},
                }
            parsed = parse_request(
                body, chat=chat_endpoint, n_layer=served.n_layer, has_river=served.has_river, defaults=served.decoding()
            )
            assert route(parsed.options["decoding"]) == route(generate), body


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c[2] is None or c[2] == "none"], ids=case_id)
def test_the_model_serve_opens_holds_the_decision(case, env):
    """`river-cpp serve` with the case's options: the served model's defaults (what a
    request without a `river` field decodes with) are the command line's decision."""
    chosen, args = command_line("serve", case, env)
    if isinstance(chosen, str):
        pytest.skip(f"refused by the command line: {chosen}")  # test_every_entry_point_... checks that
    with open_model(args, chosen) as model:
        assert route(model.decoding()) == route(chosen)
        parsed = parse_request(
            {"prompt": "x"}, chat=False, n_layer=4, has_river=model.has_river, defaults=model.decoding()
        )
        assert route(parsed.options["decoding"]) == route(chosen)


def test_the_api_calls_decode_with_the_models_decision(env):
    """generate, create_completion and create_chat_completion hand the loop the value
    RiverModel.decoding resolves for their entry kind and options."""
    model = api_model(env, "lossless", False)
    prompt = model.tokenize("Hello")
    tau = ExitPolicy.uniform(TAU, min_layer=1)
    # a lossy call decodes plainly under its policy, the default drafts (lossless)
    plain = model.generate(prompt, max_tokens=3, policy=tau)
    assert plain.speculative is None
    drafted = model.generate(prompt, max_tokens=3)
    assert drafted.speculative is not None
    completion = model.create_completion(prompt, max_tokens=3, temperature=0.0, policy=tau)
    assert "speculative" not in completion["usage"]["river"]
    chat = model.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=3, temperature=0.0)
    assert "speculative" in chat["usage"]["river"]
    # an already resolved decoding goes through unchanged, and cannot be mixed with options
    decoding = model.decoding("completion", policy=tau, temperature=0.0)
    assert model.generate(prompt, max_tokens=3, decoding=decoding).token_ids == plain.token_ids
    with pytest.raises(ValueError, match="not both"):
        model.generate(prompt, decoding=decoding, policy=tau)
    with pytest.raises(ValueError, match="not both"):
        model.create_completion(prompt, decoding=decoding, sampling=SamplingParams())
    with pytest.raises(TypeError, match="unknown"):
        model.generate(prompt, temp=0.5)


def test_the_server_refuses_what_the_model_cannot_do(env):
    served = served_model(env, "lossless", True)
    assert served.decoding().speculative == Speculative(draft="ngram")
    with pytest.raises(APIError) as caught:
        parse_request(
            {"prompt": "x", "river": {"exit_layer": 1}},
            chat=False,
            n_layer=served.n_layer,
            has_river=False,
            defaults=served.decoding(),
        )
    assert caught.value.param == "river" and "no river" in caught.value.message
