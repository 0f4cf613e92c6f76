"""Word count: split lines into words, and count them in a table.

    engine worker -A examples.wordcount:app
    engine send -A examples.wordcount:app lines "the quick brown fox"
    engine table get -A examples.wordcount:app word-counts fox
"""

import engine

app = engine.App("wordcount", broker="kafka://localhost:9092")
lines = app.topic("lines", value_type=str)
words = app.topic("words", key_type=str, value_type=int)
counts = app.Table("word-counts", default=int, key_type=str, value_type=int)


@app.agent(lines, concurrency=2)
async def split(stream):
    async for line in stream:
        for word in line.lower().split():
            await words.send(key=word, value=1)


@app.agent(words)
async def count(stream):
    async for word, n in stream.items():
        counts[word] += n
