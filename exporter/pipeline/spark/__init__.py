"""Starting and running Spark for the pipeline: the context and its JVM's flags
(`session`), PySpark's own Spark home with Spark Core's jars only (`sparkhome`), the local
workers' entry (`daemon`), the JVM's class-data archive (`jvmarchive`, made by
`archivemake`) and the cores a local master may use (`cores`). The cycle's job itself is
`pipeline/scrape.py`."""
