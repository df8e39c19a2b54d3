// Kafka 4.1.1's own PartitionChangeBuilder (kafka-metadata jar), driven as ReplicationControlManager drives it:
// tests/test_replay_kraft_oracle.py holds planner.replay_kraft to it, case by case.
//
// One case per stdin line, fields separated by '|':
//   replicas | isr | elr | lastKnownElr | leader | minIsr | elrEnabled(0/1) | unclean(0/1) | active ids | events
// lists are space-separated ints; events are KIND:BROKER, space-separated, applied in order:
//   r = generateLeaderAndIsrUpdates(brokerToRemove=b) on a partition whose ISR holds b (fencing, controlled
//       shutdown; RCM L1362-1373, L1427-1436), then b is no longer active
//   u = generateLeaderAndIsrUpdates(brokerWithUncleanShutdown=b) on a partition whose ISR or ELR holds b
//       (RCM.handleBrokerShutdown L1446-1451), then b is no longer active
//   f = b becomes active, then generateLeaderAndIsrUpdates(brokerToAdd=b) on a leaderless partition
//       (RCM.handleBrokerUnfenced L1407-1414)
//   j = an AlterPartition from the leader adding b to the ISR (RCM L1117-1134, LeaderAcceptor = isActive),
//       where the partition has a leader, b is a replica and not in the ISR
// Output, one line per case: leader | isr | elr | lastKnownElr | leaderRecoveryState (1 = RECOVERING)
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.function.IntPredicate;

import org.apache.kafka.common.DirectoryId;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.PartitionChangeRecord;
import org.apache.kafka.controller.PartitionChangeBuilder;
import org.apache.kafka.metadata.LeaderRecoveryState;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.metadata.Replicas;
import org.apache.kafka.server.common.MetadataVersion;

public class PartitionChangeOracle {
    static int[] ints(String s) {
        s = s.trim();
        if (s.isEmpty()) return new int[0];
        return Arrays.stream(s.split(" ")).mapToInt(Integer::parseInt).toArray();
    }

    static String str(int[] a) {
        StringBuilder b = new StringBuilder();
        for (int x : a) b.append(b.length() == 0 ? "" : " ").append(x);
        return b.toString();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        Uuid topicId = Uuid.randomUuid();
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\\|", -1);
            int[] replicas = ints(f[0]);
            Uuid[] dirs = new Uuid[replicas.length];
            Arrays.fill(dirs, DirectoryId.UNASSIGNED);
            PartitionRegistration p = new PartitionRegistration.Builder()
                .setReplicas(replicas).setDirectories(dirs).setIsr(ints(f[1])).setElr(ints(f[2]))
                .setLastKnownElr(ints(f[3])).setLeader(Integer.parseInt(f[4].trim()))
                .setRemovingReplicas(new int[0]).setAddingReplicas(new int[0])
                .setLeaderRecoveryState(LeaderRecoveryState.RECOVERED).setLeaderEpoch(0).setPartitionEpoch(0).build();
            int minIsr = Integer.parseInt(f[5].trim());
            boolean elr = f[6].trim().equals("1");
            boolean unclean = f[7].trim().equals("1");
            Set<Integer> active = new HashSet<>();
            for (int a : ints(f[8])) active.add(a);
            for (String ev : f[9].trim().isEmpty() ? new String[0] : f[9].trim().split(" ")) {
                char kind = ev.charAt(0);
                int b = Integer.parseInt(ev.substring(2));
                PartitionChangeBuilder builder = null;
                if (kind == 'r' || kind == 'u') {
                    boolean touched = Replicas.contains(p.isr, b) || (kind == 'u' && Replicas.contains(p.elr, b));
                    if (touched) {
                        final Set<Integer> act = new HashSet<>(active);
                        IntPredicate ok = r -> r != b && act.contains(r);
                        builder = new PartitionChangeBuilder(p, topicId, 0, ok, MetadataVersion.IBP_4_1_IV1, minIsr);
                        builder.setEligibleLeaderReplicasEnabled(elr);
                        if (unclean) builder.setElection(PartitionChangeBuilder.Election.UNCLEAN);
                        if (kind == 'u') builder.setUncleanShutdownReplicas(List.of(b));
                        builder.setTargetIsr(Replicas.toList(kind == 'r'
                            ? Replicas.copyWithout(p.isr, new int[] {b, -1})
                            : Replicas.copyWithout(p.isr, new int[] {-1, b})));
                    }
                    active.remove(b);
                } else if (kind == 'f') {
                    active.add(b);
                    if (p.leader == -1) {
                        final Set<Integer> act = new HashSet<>(active);
                        IntPredicate ok = r -> r == b || act.contains(r);
                        builder = new PartitionChangeBuilder(p, topicId, 0, ok, MetadataVersion.IBP_4_1_IV1, minIsr);
                        builder.setEligibleLeaderReplicasEnabled(elr);
                        if (unclean) builder.setElection(PartitionChangeBuilder.Election.UNCLEAN);
                        builder.setTargetIsr(Replicas.toList(Replicas.copyWithout(p.isr, new int[] {-1, -1})));
                    }
                } else if (kind == 'j') {
                    if (p.leader >= 0 && Replicas.contains(p.replicas, b) && !Replicas.contains(p.isr, b)) {
                        final Set<Integer> act = new HashSet<>(active);
                        builder = new PartitionChangeBuilder(p, topicId, 0, act::contains, MetadataVersion.IBP_4_1_IV1,
                                                             minIsr);
                        builder.setEligibleLeaderReplicasEnabled(elr);
                        if (unclean) builder.setElection(PartitionChangeBuilder.Election.UNCLEAN);
                        List<Integer> target = new ArrayList<>(Replicas.toList(p.isr));
                        target.add(b);
                        builder.setTargetIsr(target);
                    }
                } else {
                    throw new IllegalArgumentException(ev);
                }
                if (builder != null) {
                    builder.setDefaultDirProvider(id -> DirectoryId.UNASSIGNED);
                    var rec = builder.build();
                    if (rec.isPresent()) p = p.merge((PartitionChangeRecord) rec.get().message());
                }
            }
            System.out.println(p.leader + "|" + str(p.isr) + "|" + str(p.elr) + "|" + str(p.lastKnownElr) + "|"
                + (p.leaderRecoveryState == LeaderRecoveryState.RECOVERING ? 1 : 0));
        }
    }
}
