// Kafka's own message classes as a reference for engine's encoding of Kafka requests and responses:
//   java Codec decode <MessageName> <version>   hex bytes on stdin -> the message as Kafka's JSON
//   java Codec encode <MessageName> <version>   Kafka's JSON on stdin -> hex bytes
// <MessageName> as in Kafka's schemas (e.g. StreamsGroupHeartbeatRequest); run by tests/kafka/codec.py.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;

public class Codec {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String prefix = "org.apache.kafka.common.message." + args[1];
        short version = Short.parseShort(args[2]);
        Class<?> data = Class.forName(prefix + "Data");
        Class<?> json = Class.forName(prefix + "DataJsonConverter");
        String input = new String(System.in.readAllBytes(), StandardCharsets.UTF_8).trim();
        ObjectMapper mapper = new ObjectMapper();
        if (mode.equals("decode")) {
            ByteBuffer bytes = ByteBuffer.wrap(HexFormat.of().parseHex(input));
            Message message = (Message) data.getConstructor(Readable.class, short.class)
                .newInstance(new ByteBufferAccessor(bytes), version);
            if (bytes.hasRemaining()) {
                throw new IllegalStateException(bytes.remaining() + " bytes left after the message");
            }
            JsonNode node = (JsonNode) json.getMethod("write", data, short.class).invoke(null, message, version);
            System.out.println(mapper.writeValueAsString(node));
        } else {
            Message message = (Message) json.getMethod("read", JsonNode.class, short.class)
                .invoke(null, mapper.readTree(input), version);
            ObjectSerializationCache cache = new ObjectSerializationCache();
            ByteBuffer bytes = ByteBuffer.allocate(message.size(cache, version));
            message.write(new ByteBufferAccessor(bytes), cache, version);
            System.out.println(HexFormat.of().formatHex(bytes.array()));
        }
    }
}
