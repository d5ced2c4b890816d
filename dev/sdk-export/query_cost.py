"""What one query costs the emulator: loads the bench's `falling` shape (Zipf-like
partition sizes falling with the key, `customer-000001` the largest) into a table
through Microsoft's Python SDK, then times `$top=1` probes and pages of 1,000 of the
kinds a backup sends, each the fastest of five. Azurite filters every entity of the
table for each query and sorts every match before it takes the first ones, so what a
query costs follows how many keys its filter matches, not how many it returns.

Usage: TABLEVAULT_SDK_CONNECTION_STRING=... python query_cost.py [ENTITIES]
(for example against `npx azurite-table --inMemoryPersistence --tablePort 10002`,
started from tests/azurite). Prints one line per query: milliseconds, entities
returned, $top, filter.
"""

import os
import sys
import time
from collections import defaultdict

from azure.data.tables import TableServiceClient

RUNS = 5


def falling(n: int) -> dict:
    """The bench's `falling` shape (`zipf_rank` in dev/src/bench/shapes.rs)."""
    partitions = max(n // 100, 1)
    h = sum(1.0 / r for r in range(1, partitions + 1))
    by_partition = defaultdict(list)
    rank, acc = 1, 1.0
    for i in range(n):
        target = (i + 0.5) / n * h
        while acc < target and rank < partitions:
            rank += 1
            acc += 1.0 / rank
        pk = f"customer-{rank:06}"
        by_partition[pk].append({"PartitionKey": pk, "RowKey": f"order-{i:010}", "v": "x" * 100})
    return by_partition


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    service = TableServiceClient.from_connection_string(os.environ["TABLEVAULT_SDK_CONNECTION_STRING"])
    table = service.create_table_if_not_exists("querycost")
    for entities in falling(n).values():
        for start in range(0, len(entities), 100):
            table.submit_transaction([("upsert", e) for e in entities[start : start + 100]])

    def timed(query: str, top: int) -> tuple[float, int]:
        started = time.perf_counter()
        select = ["PartitionKey", "RowKey"] if top == 1 else None
        pages = table.query_entities(query, results_per_page=top, select=select).by_page()
        got = len(list(next(pages)))
        return (time.perf_counter() - started) * 1000.0, got

    queries = [
        ("PartitionKey ge 'customer-000002'", 1),
        ("PartitionKey ge 'customer-000300'", 1),
        ("PartitionKey ge 'customer-0009'", 1),
        ("PartitionKey ge 'customer-000002' and PartitionKey lt 'customer-000003'", 1),
        ("PartitionKey eq 'customer-000001' and RowKey gt 'order-0000003000'", 1),
        ("PartitionKey ge 'customer-000002'", 1000),
        ("PartitionKey ge 'customer-000200'", 1000),
        ("PartitionKey ge 'customer-000200' and PartitionKey lt 'customer-000210'", 1000),
    ]
    for query, top in queries:
        runs = [timed(query, top) for _ in range(RUNS)]
        print(f"{min(ms for ms, _ in runs):7.1f} ms  {runs[0][1]:5} returned  top={top:<5} {query}")


if __name__ == "__main__":
    main()
