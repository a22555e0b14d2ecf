"""Stand-in of RoboTwin's description/utils/generate_episode_instructions.py.

generate_episode_descriptions(task_name, episodes, max_descriptions) -> one dict per episode with "seen" and
"unseen" lists of max_descriptions instruction texts. Like upstream it uses the Python `random` module without
seeding it (template order shuffled, object wording chosen at random), so texts differ from run to run.
"""

import json
import os
import random
import re

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(kind, name):
    folder = os.path.join(_HERE, "..", kind)
    path = os.path.join(folder, f"{name}.json")
    if not os.path.exists(path):
        path = os.path.join(folder, "_default.json")
    with open(path) as handle:
        return json.load(handle)


def _placeholders(template):
    return set(re.findall(r"{([^}]+)}", template))


def _matching(templates, params):
    """Templates whose placeholders are exactly the episode's parameters (arm placeholders may be missing)."""
    keys = {key.strip("{}") for key in params}
    arms = {key for key in keys if len(key) == 1 and key.islower()}
    shuffled = list(templates)
    random.shuffle(shuffled)
    return [t for t in shuffled if _placeholders(t) == keys or (arms and _placeholders(t) | arms == keys)]


def _fill(template, params, kind, task_words, objects):
    text = template.replace("<task>", task_words)
    for key, value in params.items():
        name = key.strip("{}")
        obj = objects.get(str(value).split("/")[0])
        if obj is not None:
            words = f"the {random.choice(obj.get(kind) or obj['seen'])}"
        elif len(name) == 1 and name.islower():
            words = f"the {value} arm"
        else:
            words = str(value)
        text = text.replace("{" + name + "}", words)
    return text


def generate_episode_descriptions(task_name, episodes, max_descriptions=1000000):
    templates = _load("task_instruction", task_name)
    objects = _load("objects_description", task_name)
    task_words = task_name.replace("_", " ")
    results = []
    for index, params in enumerate(episodes):
        generated = {}
        for kind in ("seen", "unseen"):
            chosen = _matching(templates.get(kind, []), params)
            texts = []
            while chosen and len(texts) < max_descriptions:
                for template in chosen:
                    if len(texts) >= max_descriptions:
                        break
                    texts.append(_fill(template, params, kind, task_words, objects))
            generated[kind] = texts
        if not generated["seen"] and not generated["unseen"]:
            print(f"Episode {index}: No valid instructions found")
            continue
        results.append({"episode_index": index, **generated})
    return results
