"""The Kafka rights each sparkiq role needs: a serving node, `sparkiq table create`, a
pipeline run by `sparkiq run`.

One definition: the node and the commands check these before they rely on them
(`sparkiq.kafka.access`), the end-to-end test of a secured cluster grants exactly these and
no more (tests/e2e/test_acls.py), and the README's table of rights is made from them
(tests/unit/test_readme.py checks it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkiq.kafka.catalog import catalog_topic
from sparkiq.kafka.progress import progress_topic, queries_topic
from sparkiq.kafka.rights import Need, Operation, Resource

__all__ = [
    "app_topics",
    "pipeline_needs",
    "serving_group",
    "serving_needs",
    "table_create_needs",
]


def serving_group(app: str) -> str:
    """The consumer group the serving nodes of *app* form."""
    return f"{app}.serving"


def app_topics(app: str) -> tuple[str, str, str]:
    """The app's own topics: its catalog, its pipeline's progress and query figures."""
    return catalog_topic(app), progress_topic(app), queries_topic(app)


def serving_needs(app: str, changelogs: Mapping[str, str]) -> list[Need]:
    """What a serving node of *app* needs, with *changelogs* (table name -> topic)."""
    catalog, progress, queries = app_topics(app)
    return [
        Need(Resource.TOPIC, catalog, Operation.READ, "learn the tables"),
        Need(Resource.TOPIC, progress, Operation.READ, "follow the pipeline"),
        Need(Resource.TOPIC, queries, Operation.READ, "follow the pipeline"),
        Need(Resource.GROUP, serving_group(app), Operation.READ, "join the serving group"),
        *(
            Need(Resource.TOPIC, topic, Operation.READ, f"restore table {name!r}")
            for name, topic in sorted(changelogs.items())
        ),
    ]


def table_create_needs(app: str, topic: str) -> list[Need]:
    """What `sparkiq table create` needs to register *topic* as a table of *app*."""
    catalog, _, _ = app_topics(app)
    return [
        Need(Resource.TOPIC, topic, Operation.READ, "sample the table's topic"),
        Need(Resource.TOPIC, catalog, Operation.READ, "read the tables registered"),
        Need(Resource.TOPIC, catalog, Operation.WRITE, "register the table"),
    ]


def pipeline_needs(app: str, sources: Sequence[str], changelogs: Sequence[str]) -> list[Need]:
    """What `sparkiq run` needs to read *sources* and write the *changelogs* of *app*'s
    tables (topics that exist; CREATE on them besides lets the pipeline make them)."""
    catalog, progress, queries = app_topics(app)
    return [
        *(Need(Resource.TOPIC, t, Operation.READ, "read the source") for t in sources),
        *(Need(Resource.TOPIC, t, Operation.WRITE, "write the table") for t in changelogs),
        Need(Resource.TOPIC, catalog, Operation.READ, "read the tables registered"),
        Need(Resource.TOPIC, catalog, Operation.WRITE, "register the tables"),
        Need(Resource.TOPIC, progress, Operation.WRITE, "publish the batches committed"),
        Need(Resource.TOPIC, queries, Operation.WRITE, "publish the queries' figures"),
    ]


def rights_table() -> str:
    """The rights of every role as a Markdown table (the README's), for an app ``<app>``."""
    roles = [
        ("`sparkiq serve` (a node)", serving_needs("<app>", {"<table>": "<changelog>"})),
        ("`sparkiq table create`", table_create_needs("<app>", "<topic>")),
        ("`sparkiq run` (the pipeline)", pipeline_needs("<app>", ["<source>"], ["<changelog>"])),
    ]
    lines = ["| role | resource | operations | needed to |", "|---|---|---|---|"]
    for role, needs in roles:
        rows: dict[tuple[Resource, str], tuple[list[str], list[str]]] = {}
        for need in needs:
            ops, why = rows.setdefault((need.resource, need.name), ([], []))
            ops.append(need.operation.value)
            if need.for_what not in why:
                why.append(need.for_what)
        for (resource, name), (ops, why) in rows.items():
            lines.append(
                f"| {role} | {resource.value} `{name}` | {', '.join(ops)} | {'; '.join(why)} |"
            )
    return "\n".join(lines) + "\n"
