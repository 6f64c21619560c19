"""Reading what a run leaves in its job dir."""
import json


def metrics(job_dir):
    """metrics.jsonl as a list of dicts."""
    return [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]


def result(job_dir):
    return json.loads((job_dir / "result.json").read_text())
