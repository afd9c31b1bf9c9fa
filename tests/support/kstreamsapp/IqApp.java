// A Kafka Streams application for sparkiq's end-to-end test (tests/e2e/test_kstreams.py):
// a KTable, a windowed count and a session count, with exactly-once processing. It has no
// RPC layer; its own interactive queries (one instance, all partitions) are the oracle the
// test compares sparkiq's answers with.
//
// Usage: java IqApp BOOTSTRAP APPLICATION_ID STATE_DIR PROFILES_TOPIC CLICKS_TOPIC
// Commands on stdin, one a line: "dump PATH" writes every store's contents to PATH as JSON
// and answers "dumped PATH"; "stop" closes the application. It prints "running" once RUNNING.

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.ReadOnlySessionStore;
import org.apache.kafka.streams.state.ReadOnlyWindowStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;

public final class IqApp {
    static final long WINDOW_MS = 10_000;
    static final long GAP_MS = 5_000;
    static final Duration GRACE = Duration.ofMinutes(30);

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 200);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);

        StreamsBuilder builder = new StreamsBuilder();
        builder.table(
            args[3],
            Consumed.with(Serdes.String(), Serdes.String()),
            Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("profiles"));
        KStream<String, String> clicks =
            builder.stream(args[4], Consumed.with(Serdes.String(), Serdes.String()));
        clicks.groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), GRACE))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("clicks"));
        clicks.groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
            .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(GAP_MS), GRACE))
            .count(Materialized.<String, Long, SessionStore<Bytes, byte[]>>as("sessions"));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch running = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                running.countDown();
            }
        });
        streams.start();
        running.await();
        System.out.println("running");
        System.out.flush();

        ObjectMapper json = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.startsWith("dump ")) {
                String path = line.substring(5).trim();
                json.writeValue(new File(path), dump(streams));
                System.out.println("dumped " + path);
                System.out.flush();
            } else if (line.trim().equals("stop")) {
                break;
            }
        }
        streams.close(Duration.ofSeconds(30));
        System.out.println("stopped");
        System.out.flush();
    }

    /** Every store's contents, read through the application's own interactive queries. */
    static Map<String, Object> dump(KafkaStreams streams) {
        ReadOnlyKeyValueStore<String, String> profiles = streams.store(
            StoreQueryParameters.fromNameAndType("profiles", QueryableStoreTypes.keyValueStore()));
        Map<String, String> kv = new LinkedHashMap<>();
        try (KeyValueIterator<String, String> it = profiles.all()) {
            while (it.hasNext()) {
                KeyValue<String, String> e = it.next();
                kv.put(e.key, e.value);
            }
        }
        ReadOnlyWindowStore<String, Long> windowStore = streams.store(
            StoreQueryParameters.fromNameAndType("clicks", QueryableStoreTypes.windowStore()));
        List<List<Object>> windows = new ArrayList<>();
        TreeSet<String> keys = new TreeSet<>();
        try (KeyValueIterator<Windowed<String>, Long> it = windowStore.all()) {
            while (it.hasNext()) {
                KeyValue<Windowed<String>, Long> e = it.next();
                keys.add(e.key.key());
                windows.add(List.of(e.key.key(), e.key.window().start(), e.key.window().end(), e.value));
            }
        }
        ReadOnlySessionStore<String, Long> sessionStore = streams.store(
            StoreQueryParameters.fromNameAndType("sessions", QueryableStoreTypes.sessionStore()));
        List<List<Object>> sessions = new ArrayList<>();
        // Bounded in time: fetch(key) walks every segment since 1970 through the cache.
        long now = System.currentTimeMillis();
        for (String key : keys) {
            try (KeyValueIterator<Windowed<String>, Long> it =
                     sessionStore.findSessions(key, now - 3_600_000L, now + 3_600_000L)) {
                while (it.hasNext()) {
                    KeyValue<Windowed<String>, Long> e = it.next();
                    sessions.add(List.of(e.key.key(), e.key.window().start(), e.key.window().end(), e.value));
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("profiles", kv);
        out.put("clicks", windows);
        out.put("sessions", sessions);
        return out;
    }
}
