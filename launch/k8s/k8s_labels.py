"""Kubernetes' rules for label values, shared by manifests.py (which refuses to write a manifest
with a bad one) and validate.py (which reports one, as the API server would).

A label value is empty or at most 63 characters of A-Z, a-z, 0-9, '-', '_' and '.', beginning and
ending with a letter or digit (k8s.io/apimachinery/pkg/util/validation: IsValidLabelValue).
Stdlib only.
"""

import re

MAX_LEN = 63
VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
RULE = "at most 63 characters of A-Z, a-z, 0-9, '-', '_', '.', beginning and ending with a letter or digit"
# The maps whose values are label values: metadata.labels, a Service's spec.selector,
# a label selector's matchLabels.
LABEL_MAPS = ("labels", "selector", "matchLabels")


def value_problem(v):
    """Why `v` is not a label value, or None when it is one."""
    if not isinstance(v, str):
        return f"{v!r} is not a string"
    if len(v) > MAX_LEN or not VALUE.fullmatch(v):
        return f"{v!r} is not a Kubernetes label value ({RULE})"
    return None


def problems(doc, path=""):
    """(field path, reason) for every bad label value in a Kubernetes object."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            here = f"{path}.{k}"
            if k in LABEL_MAPS and isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
                found += [(f"{here}.{lk}", p) for lk, lv in v.items() if (p := value_problem(lv))]
            else:
                found += problems(v, here)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += problems(v, f"{path}.{i}")
    return found
