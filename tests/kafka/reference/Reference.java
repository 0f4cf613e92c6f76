import java.nio.file.Files;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.Stores;

/**
 * Kafka Streams itself, the reference that engine's differential tests compare with: one topology per
 * mode, over string keys and values with record timestamps, writing its results to an output topic.
 *
 *   java Reference BOOTSTRAP APP_ID MODE INPUT OUTPUT A_MS B_MS [RIGHT_INPUT]
 *
 * session-count  A = inactivity gap, B = grace: final session counts, key "key@start@end", value the count
 * sliding-count  A = time difference, B = grace: final sliding-window counts, as above
 * left-join      A = time difference, B = grace: INPUT left-joined with RIGHT_INPUT, value "left|right"
 *                ("null" for a missing right)
 * table-joins    A, B unused: tables over INPUT and RIGHT_INPUT (builder.table, a null value deletes) joined
 *                by key, and a table over ORDERS (a value "foreignkey/rest") joined with RIGHT_INPUT's by
 *                foreign key; each join's changes, value "left|right" (a tombstone where a row no longer
 *                joins), keyed "inner:key", "left:key", "outer:key", "fk-inner:key" and "fk-left:key"
 *
 *   java Reference BOOTSTRAP APP_ID table-joins INPUT OUTPUT 0 0 RIGHT_INPUT ORDERS
 *
 * event-time     A, B unused; INPUT is a prefix: one topology over six topics, as one app of several event-time
 *                tables and joins (tests/integration/event_time_apps.py): the words of PREFIXwords counted in
 *                session windows (gap 5 s, grace 10 s) and sliding windows (30 s, grace 10 s), final results
 *                keyed "sessions:key@start@end" and "sliding:key@start@end"; PREFIXleft joined with
 *                PREFIXright within 5 s (grace 2 s), inner, left and outer, keyed "ss-inner:key" (and
 *                "ss-left", "ss-outer"), value "left|right"; tables over PREFIXt-left, PREFIXt-right and
 *                PREFIXt-orders joined as table-joins does, its tags "inner", "left", "outer", "fk-inner"
 *
 *   java Reference BOOTSTRAP APP_ID event-time PREFIX OUTPUT 0 0
 *
 * versioned-join A = history retention, B = grace: a table over RIGHT_INPUT in a versioned store
 *                (Stores.persistentVersionedKeyValueStore, a null value deletes), INPUT left-joined with it
 *                with a grace period (Joined.withGracePeriod), value "order|price" ("null" for none)
 *
 * Record caches are off, so results do not depend on when Kafka Streams commits, nor (emit interval 0)
 * those of joins on the wall clock. Prints "RUNNING" once it runs, and stops on SIGTERM.
 */
public final class Reference {
    public static void main(final String[] args) throws Exception {
        final String bootstrap = args[0], appId = args[1], mode = args[2], input = args[3], output = args[4];
        final Duration a = Duration.ofMillis(Long.parseLong(args[5])), b = Duration.ofMillis(Long.parseLong(args[6]));
        final Serde<String> strings = Serdes.String();
        final StreamsBuilder builder = new StreamsBuilder();
        final Consumed<String, String> consumed = Consumed.with(strings, strings);
        final Produced<String, String> produced = Produced.with(strings, strings);
        switch (mode) {
            case "session-count" -> finals(builder.stream(input, consumed).groupByKey()
                    .windowedBy(SessionWindows.ofInactivityGapAndGrace(a, b)).count(), output, produced);
            case "sliding-count" -> finals(builder.stream(input, consumed).groupByKey()
                    .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(a, b)).count(), output, produced);
            case "left-join" -> {
                final KStream<String, String> right = builder.stream(args[7], consumed);
                builder.stream(input, consumed)
                       .leftJoin(right, (left, other) -> left + "|" + other, JoinWindows.ofTimeDifferenceAndGrace(a, b),
                                 StreamJoined.with(strings, strings, strings))
                       .to(output, produced);
            }
            case "table-joins" -> {
                final KTable<String, String> left = builder.table(input, consumed);
                final KTable<String, String> right = builder.table(args[7], consumed);
                final KTable<String, String> orders = builder.table(args[8], consumed);
                final ValueJoiner<String, String, String> pair = (row, other) -> row + "|" + other;
                final Function<String, String> foreignKey = row -> row.split("/")[0];
                tagged(left.join(right, pair), "inner", output, produced);
                tagged(left.leftJoin(right, pair), "left", output, produced);
                tagged(left.outerJoin(right, pair), "outer", output, produced);
                tagged(orders.join(right, foreignKey, pair), "fk-inner", output, produced);
                tagged(orders.leftJoin(right, foreignKey, pair), "fk-left", output, produced);
            }
            case "event-time" -> {
                final var words = builder.stream(input + "words", consumed).groupByKey();
                finals(words.windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofSeconds(5),
                        Duration.ofSeconds(10))).count(), "sessions:", output, produced);
                finals(words.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(30),
                        Duration.ofSeconds(10))).count(), "sliding:", output, produced);
                final KStream<String, String> left = builder.stream(input + "left", consumed);
                final KStream<String, String> right = builder.stream(input + "right", consumed);
                final JoinWindows within = JoinWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(5),
                                                                                Duration.ofSeconds(2));
                final StreamJoined<String, String, String> joined = StreamJoined.with(strings, strings, strings);
                final ValueJoiner<String, String, String> pair = (row, other) -> row + "|" + other;
                left.join(right, pair, within, joined).selectKey((key, value) -> "ss-inner:" + key)
                    .to(output, produced);
                left.leftJoin(right, pair, within, joined).selectKey((key, value) -> "ss-left:" + key)
                    .to(output, produced);
                left.outerJoin(right, pair, within, joined).selectKey((key, value) -> "ss-outer:" + key)
                    .to(output, produced);
                final KTable<String, String> rows = builder.table(input + "t-left", consumed);
                final KTable<String, String> others = builder.table(input + "t-right", consumed);
                final KTable<String, String> orders = builder.table(input + "t-orders", consumed);
                tagged(rows.join(others, pair), "inner", output, produced);
                tagged(rows.leftJoin(others, pair), "left", output, produced);
                tagged(rows.outerJoin(others, pair), "outer", output, produced);
                tagged(orders.join(others, row -> row.split("/")[0], pair), "fk-inner", output, produced);
            }
            case "versioned-join" -> {
                final KTable<String, String> prices = builder.table(args[7], consumed,
                        Materialized.<String, String>as(Stores.persistentVersionedKeyValueStore("prices", a))
                                    .withKeySerde(strings).withValueSerde(strings));
                builder.stream(input, consumed)
                       .leftJoin(prices, (order, price) -> order + "|" + price,
                                 Joined.<String, String, String>with(strings, strings, strings).withGracePeriod(b))
                       .to(output, produced);
            }
            default -> throw new IllegalArgumentException("no mode " + mode);
        }
        final Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.STATE_DIR_CONFIG, Files.createTempDirectory("reference-" + appId).toString());
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // Left/outer join results without partner are emitted at most once a second of wall clock by
        // default, which makes which of them a late partner still takes out depend on timing: every record.
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, 0L);
        final KafkaStreams streams = new KafkaStreams(builder.build(), props);
        final CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println(now);
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(error -> {
            error.printStackTrace();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(20))));
        streams.start();
        stopped.await();
    }

    /** A table join's changes to `output`, each key prefixed with "`tag`:" (tombstones kept). */
    private static void tagged(final KTable<String, String> joined, final String tag, final String output,
                               final Produced<String, String> produced) {
        joined.toStream().selectKey((key, value) -> tag + ":" + key).to(output, produced);
    }

    /** A windowed count's final results (suppress until the window closes) as "key@start@end" -> count. */
    private static void finals(final KTable<Windowed<String>, Long> counts,
                                                            final String output,
                                                            final Produced<String, String> produced) {
        finals(counts, "", output, produced);
    }

    /** As above, each key prefixed with `tag`. */
    private static void finals(final KTable<Windowed<String>, Long> counts, final String tag,
                               final String output, final Produced<String, String> produced) {
        counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
              .toStream()
              .filter((key, count) -> count != null)
              .map((key, count) -> KeyValue.pair(
                      tag + key.key() + "@" + key.window().start() + "@" + key.window().end(), String.valueOf(count)))
              .to(output, produced);
    }
}
