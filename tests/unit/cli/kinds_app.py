"""An app with a GlobalTable (written by an agent) and a source table (over a compacted topic it does not
write), for the CLI and export tests of every table kind."""

import engine

app = engine.App("kinds")
regions = app.GlobalTable("regions", key_type=str, value_type=str)
prices = app.Table("prices", source_topic=app.topic("price-feed", key_type=str, value_type=float))
region_updates = app.topic("region-updates", key_type=str, value_type=str)


@app.agent(region_updates)
async def load_regions(stream):
    async for code, name in stream.items():
        regions[code] = name
