"""A plain sequential export written with Microsoft's Python SDK (azure-data-tables):
every entity of every named table, one connection, one table after the other, written
to a JSON-lines file per table. `tablevault-bench shapes --sdk-python <python>` runs it
as the baseline issue 11 measured tablevault against.

Usage: TABLEVAULT_SDK_CONNECTION_STRING=... python export.py TABLE[,TABLE...] OUT_DIR
Prints {"entities": N, "seconds": S} on stdout.
"""

import json
import os
import sys
import time

from azure.data.tables import TableServiceClient


def main() -> None:
    connection_string = os.environ["TABLEVAULT_SDK_CONNECTION_STRING"]
    tables = [t for t in sys.argv[1].split(",") if t]
    out_dir = sys.argv[2]
    service = TableServiceClient.from_connection_string(connection_string)
    started = time.monotonic()
    entities = 0
    for name in tables:
        client = service.get_table_client(name)
        with open(os.path.join(out_dir, f"{name}.jsonl"), "w", encoding="utf-8") as out:
            for entity in client.list_entities():
                out.write(json.dumps(dict(entity), default=str))
                out.write("\n")
                entities += 1
    print(json.dumps({"entities": entities, "seconds": time.monotonic() - started}))


if __name__ == "__main__":
    main()
