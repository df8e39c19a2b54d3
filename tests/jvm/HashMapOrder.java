import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;

import scala.jdk.javaapi.CollectionConverters;

/**
 * What Kafka's ZkReplicaStateMachine.handleStateChanges does with the replicas of brokers that die in one
 * event: {@code replicas.groupBy(_.replica).forKeyValue { (replicaId, replicas) => ... }}, run on the
 * scala-library jar given on the class path (Kafka's own). Each input line is a comma-separated set of broker
 * ids; each output line is the order in which foreachEntry visits them. The replicas are fed in a scrambled
 * order, two partitions per broker, as a Set's toSeq would give them.
 */
public class HashMapOrder {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        String line;
        while ((line = in.readLine()) != null) {
            String[] ids = line.trim().split(",");
            List<int[]> replicas = new ArrayList<>();
            for (int p = 0; p < 2; p++) {
                for (int i = ids.length - 1; i >= 0; i--) {
                    replicas.add(new int[] {p, Integer.parseInt(ids[(i + p * 3) % ids.length])});
                }
            }
            scala.collection.immutable.List<int[]> seq = CollectionConverters.asScala(replicas).toList();
            scala.collection.immutable.Map<Object, ?> byBroker = seq.<Object>groupBy(r -> (Object) Integer.valueOf(r[1]));
            StringBuilder order = new StringBuilder();
            byBroker.foreachEntry((k, v) -> {
                order.append(order.length() > 0 ? "," : "").append(k);
                return null;
            });
            out.append(order).append('\n');
        }
        System.out.print(out);
    }
}
