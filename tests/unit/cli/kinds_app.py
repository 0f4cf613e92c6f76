"""An app with a GlobalTable (written by an agent), a source table (over a compacted topic it does not
write) and a versioned one over a topic, for the CLI and export tests of every table kind."""

import engine

app = engine.App("kinds")
regions = app.GlobalTable("regions", key_type=str, value_type=str)
prices = app.Table("prices", source_topic=app.topic("price-feed", key_type=str, value_type=float))
quotes = app.Table("quotes", source_topic=app.topic("quote-feed", key_type=str, value_type=float)
                   ).versioned(history=3600)
region_updates = app.topic("region-updates", key_type=str, value_type=str)


@app.agent(region_updates)
async def load_regions(stream):
    async for code, name in stream.items():
        regions[code] = name
