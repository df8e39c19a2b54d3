"""The risk job on Spark: the only part of the planner that imports pyspark at module level.

  settings     the job's Spark settings, built once (session, `kplan risk --spark-submit`, Airflow); no pyspark
  session      the SparkSession and its teardown (jvms: the JVMs this process started, through /proc)
  columns      column-expression building blocks every rule set uses (stages, let, literal arrays)
  zk_election  the ZooKeeper controller's election rules as column expressions (a KRaft set goes beside it)
  job          the job: scenario rows, the rule set's stages, outcomes, partitions.parquet, summary
  aggregate    per-scenario sums, leader load and levels, the worst partitions
  submit       the spark-submit command line (`main`)

Nothing is imported here, so `planner.spark.settings` needs no Spark installation.
"""
