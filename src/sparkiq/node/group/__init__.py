"""The serving group: membership through Kafka's group protocol with sparkiq's assignor
(`membership`), the pure assignment of actives and standbys (`assignment`), asking for a
rebalance after a warm-up (`rebalance`), and the URL a node advertises to the others
(`advertise`).

May import: `sparkiq.core`, `sparkiq.kafka`; nothing of stores or restore.
"""
