"""Build LiteLLM's own Router from a written proxy config and draw deployments from it.

Run by the LiteLLM test with the interpreter of a separate environment that has the
``litellm`` package (``make litellm-env``), so the project's environment keeps none of its
dependencies. What it does is what LiteLLM's proxy does with a config file: ``os.environ/``
values read through ``litellm.get_secret``, then ``model_list`` and ``router_settings``
handed to ``litellm.Router``. Prints ``{litellm model: picks}`` as JSON.

Usage: python litellm_draw.py CONFIG.yaml MODEL_GROUP DRAWS SEED
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter


def main(argv: list[str]) -> int:
    path, group, draws, seed = argv[1], argv[2], int(argv[3]), int(argv[4])
    # The bundled cost map, not a download: this machine reaches no model hub.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    import yaml

    with open(path, encoding="utf-8") as handle:
        loaded = yaml.safe_load(handle)
    for entry in loaded["model_list"]:
        params = entry["litellm_params"]
        for key, value in list(params.items()):
            if isinstance(value, str) and value.startswith("os.environ/"):
                params[key] = litellm.get_secret(value)
    router = litellm.Router(model_list=loaded["model_list"], **loaded["router_settings"])
    random.seed(seed)
    picks = Counter(
        router.get_available_deployment(group)["litellm_params"]["model"] for _ in range(draws)
    )
    print(json.dumps(dict(picks), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
