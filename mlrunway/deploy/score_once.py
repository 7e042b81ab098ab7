"""The smoke test's reference job: the team's score.py answers one request, on the deployed model version.

``python score_once.py --code DIR --script score.py --model DIR --request FILE --out DIR``

It runs as a job in the deployment's scoring environment (the scoring image, plus the deployment's
``environment_variables``), never in an Airflow worker; this file alone is the job's code folder, the team's code
folder an input beside it. It imports nothing but the standard library (and, through score.py, what the team's
code imports), and loads score.py as Azure ML's scoring server and the local endpoint do: the code folder appended
to ``sys.path``, score.py by ``spec_from_file_location``, ``AZUREML_MODEL_DIR`` the model's folder, ``init()`` then
``run(<the request's text>)``. Nothing is written into the code folder (no bytecode). The answer is the body the
server would send: an ``AMLResponse``'s message, else the JSON of what ``run()`` returned.

``<out>/answer.json``: ``{"key": "<--key>", "status": 200, "body": "..."}``, or ``{"key": ..., "error": "<traceback>"}`` when score.py could not
answer; exit 0 either way (the deploy task reads it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

ANSWER_FILE = "answer.json"


def answer(code: str, script: str, model: str, request: str) -> dict[str, object]:
    os.environ["AZUREML_MODEL_DIR"] = str(Path(model).resolve())
    sys.dont_write_bytecode = True  # the team's folder stays as it was given
    sys.path.append(code)
    spec = importlib.util.spec_from_file_location("score", os.path.join(code, script))
    if spec is None or spec.loader is None:
        raise ImportError(f"{script} is not a Python file in the code folder")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.init()
    with open(request, encoding="utf-8") as handle:
        result = module.run(handle.read())
    if hasattr(result, "status_code"):
        message = result.message
        return {"status": int(result.status_code), "body": message if isinstance(message, str) else json.dumps(message)}
    return {"status": 200, "body": json.dumps(result)}


def main(argv: list[str] | None = None) -> int:
    parse = argparse.ArgumentParser(prog="score_once", description=__doc__.split("\n\n")[0])
    for name in ("--code", "--script", "--model", "--request", "--out"):
        parse.add_argument(name, required=True)
    parse.add_argument("--key", default="", help="what the task asked, as a digest, echoed into the answer")
    args = parse.parse_args(argv)
    try:
        outcome = answer(args.code, args.script, args.model, args.request)
    except BaseException:  # noqa: BLE001 - whatever the team's code raised (SystemExit included) is the answer
        outcome = {"error": traceback.format_exc(limit=20)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / ANSWER_FILE).write_text(json.dumps({"key": args.key, **outcome}))
    print(f"score_once: {'answered ' + str(outcome['status']) if 'status' in outcome else 'failed'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
