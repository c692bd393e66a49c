package io.ferrymq.spark;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The rows' schema: exactly {@code ferrymq_spark.rows.SCHEMA}, so both readers give the same DataFrame. */
final class RowSchema {

    static final StructType SCHEMA = new StructType(new StructField[] {
        field("topic", DataTypes.StringType, false),
        field("brokerName", DataTypes.StringType, false),
        field("queueId", DataTypes.IntegerType, false),
        field("queueOffset", DataTypes.LongType, false),
        field("msgId", DataTypes.StringType, false),
        field("keys", DataTypes.StringType, true),
        field("tags", DataTypes.StringType, true),
        field("body", DataTypes.BinaryType, false),
        field("properties", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, true), false),
        field("bornTimestamp", DataTypes.TimestampType, false),
        field("storeTimestamp", DataTypes.TimestampType, false),
    });

    /** The schema as a table's columns. */
    static Column[] columns() {
        StructField[] fields = SCHEMA.fields();
        Column[] columns = new Column[fields.length];
        for (int i = 0; i < fields.length; i++) {
            columns[i] = Column.create(fields[i].name(), fields[i].dataType(), fields[i].nullable());
        }
        return columns;
    }

    private static StructField field(String name, DataType type, boolean nullable) {
        return DataTypes.createStructField(name, type, nullable);
    }

    private RowSchema() {
    }
}
