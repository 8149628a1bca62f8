"""Model rows read and written with plain SQL on the hot paths: row locks, the submit's
problem, its two new rows and their pointer, the API token.

Compiling a queryset costs several times running its statement on this kind of path; a
`RowShape` is compiled once per model (and field subset) and builds instances with the
converters Django's compiler would apply (aware datetimes, JSON, booleans). Fields left
out are deferred, so touching one loads it rather than reading a wrong default.
"""

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init


def database():
    """This thread's connection itself. `django.db.connection` is a proxy that looks the
    connection up again on every attribute read, a few microseconds each, and a statement
    on these paths reads it a dozen times (field preparation, converters, cursors)."""
    return connections[DEFAULT_DB_ALIAS]


class RowShape:
    def __init__(self, model, names: tuple | None = None):
        connection = database()
        quote = connection.ops.quote_name
        fields = [f for f in model._meta.concrete_fields if names is None or f.attname in names]
        self.table = quote(model._meta.db_table)
        self.pk_column = quote(model._meta.pk.column)
        self.column_names = [quote(f.column) for f in fields]
        self.columns = ", ".join(self.column_names)
        self.attnames = [f.attname for f in fields]
        self.converters = []
        for index, field in enumerate(fields):
            column = field.get_col(model._meta.db_table)
            converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
            if converters:
                self.converters.append((index, column, converters))
        self.model = model
        # A model something listens to the creation of (an image field's dimensions, say)
        # is built by `Model.from_db`, which sends its init signals.
        self.plain = not (pre_init.has_listeners(model) or post_init.has_listeners(model))

    def columns_of(self, alias: str) -> str:
        return ", ".join(f"{alias}.{name}" for name in self.column_names)

    def build(self, row, connection=None):
        connection = connection or database()
        values = list(row)
        for index, column, converters in self.converters:
            for converter in converters:
                values[index] = converter(values[index], column, connection)
        if not self.plain:
            return self.model.from_db(connection.alias, self.attnames, values)
        # What `Model.from_db` makes, without `Model.__init__`'s walk over every field: the
        # loaded fields set, the rest deferred (absent from the instance, so reading one
        # loads it).
        instance = self.model.__new__(self.model)
        instance._state = ModelState()
        instance._state.adding = False
        instance._state.db = connection.alias
        instance.__dict__.update(zip(self.attnames, values))
        return instance

    def split(self, row, connection=None) -> tuple:
        """(this shape's instance, the rest of the row) of a row that begins with its columns."""
        return self.build(row[:len(self.attnames)], connection), row[len(self.attnames):]

    def load(self, sql: str, params, connection=None) -> list:
        connection = connection or database()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return [self.build(row, connection) for row in rows]


_shapes: dict[tuple, RowShape] = {}


def shape(model, names: tuple | None = None, connection=None) -> RowShape:
    """The shape of `model`'s rows: every concrete field, or only the attnames `names`."""
    key = (model, names, (connection or database()).vendor)
    found = _shapes.get(key)
    if found is None:
        found = _shapes[key] = RowShape(model, names)
    return found


def write(connection, sql: str, params) -> None:
    """Run a write whose answer (its row count) no one reads: inside a transaction on MariaDB
    it goes with the transaction's next statement (`kece.mysql.pipeline`)."""
    defer = getattr(connection, "defer", None)
    if defer is not None:
        defer(sql, params)
        return
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def read_later(sql: str, params, connection=None) -> list:
    """The rows of `sql`, read with the transaction's next statement that awaits an answer, or
    its COMMIT (`kece.mysql.pipeline`): the list is filled then. Elsewhere they are read now."""
    connection = connection or database()
    defer = getattr(connection, "defer", None)
    if defer is not None:
        return defer(sql, params, rows=True)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def fetch_each(statements: list, connection=None) -> list[list]:
    """The rows of each of `statements` (`(sql, params)` pairs), run in order: inside a
    transaction on MariaDB, in one round trip."""
    connection = connection or database()
    if len(statements) == 1:  # one statement: sent as it is, with whatever waits to go
        [(sql, params)] = statements
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [list(cursor.fetchall())]
    found = [read_later(sql, params, connection) for sql, params in statements]
    flush(connection)
    return found


def flush(connection=None) -> None:
    """Send what this transaction has deferred, now: where its failure should be raised."""
    connection = connection or database()
    if hasattr(connection, "flush"):
        connection.flush()


def _insert_sql(connection, meta, fields, count: int) -> str:
    quote = connection.ops.quote_name
    row = f"({', '.join(['%s'] * len(fields))})"
    return (f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"
            f" VALUES {', '.join([row] * count)}")


def _prepared(connection, instance, fields) -> list:
    """The values `Model.save()` would write: every field's `pre_save` value (its default,
    `auto_now_add`) prepared for the database."""
    return [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]


def _written(connection, instance) -> None:
    instance._state.adding = False
    instance._state.db = connection.alias


def insert(instance) -> None:
    """INSERT `instance` as a new row, as `Model.save()` would, and set its new primary key.
    No signals are sent; none is connected to the rows this writes."""
    meta = type(instance)._meta
    generated = meta.pk.attname if getattr(instance, meta.pk.attname) is None else None
    fields = [f for f in meta.concrete_fields if f.attname != generated]
    connection = database()
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(connection, meta, fields, 1), _prepared(connection, instance, fields))
        if generated is not None:
            setattr(instance, generated, connection.ops.last_insert_id(cursor, meta.db_table, meta.pk.column))
    _written(connection, instance)


def insert_if(instance, source: str, source_params) -> bool:
    """INSERT `instance` as `insert` does, in the same statement as a SELECT of `source` (its
    FROM and WHERE clauses and any lock clause): the row goes in once for each row `source`
    finds. Whether it went in (then its primary key is set)."""
    meta = type(instance)._meta
    generated = meta.pk.attname if getattr(instance, meta.pk.attname) is None else None
    fields = [f for f in meta.concrete_fields if f.attname != generated]
    connection = database()
    quote = connection.ops.quote_name
    sql = (f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"
           f" SELECT {', '.join(['%s'] * len(fields))} FROM {source}")
    with connection.cursor() as cursor:
        cursor.execute(sql, [*_prepared(connection, instance, fields), *source_params])
        if cursor.rowcount < 1:
            return False
        if generated is not None:
            setattr(instance, generated, connection.ops.last_insert_id(cursor, meta.db_table, meta.pk.column))
    _written(connection, instance)
    return True


def insert_many(instances: list) -> None:
    """INSERT new rows of one model in one statement, their keys left to the database (and
    not read back). No signals are sent."""
    if not instances:
        return
    meta = type(instances[0])._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    connection = database()
    values = [value for instance in instances for value in _prepared(connection, instance, fields)]
    write(connection, _insert_sql(connection, meta, fields, len(instances)), values)
    for instance in instances:
        _written(connection, instance)


def insert_values(model, rows: list[dict]) -> None:
    """INSERT new rows of `model`, each given as {attname: value}, in one statement: what
    `insert_many` writes for instances made of them, without making the instances (on a hot
    path, `Model.__init__` costs more than the INSERT's own preparation). A field a row
    leaves out takes its default; a field that sets itself on save (`auto_now`) must be given."""
    if not rows:
        return
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    connection = database()
    names = {field.attname for field in fields}
    values = []
    for row in rows:
        if unknown := row.keys() - names:
            raise ValueError(f"{meta.label} has no field {', '.join(sorted(unknown))}")
        for field in fields:
            if field.attname in row:
                value = row[field.attname]
            elif getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
                raise ValueError(f"{meta.label}.{field.attname} sets itself on save: give it")
            else:
                value = field.get_default()
            values.append(field.get_db_prep_save(value, connection))
    write(connection, _insert_sql(connection, meta, fields, len(rows)), values)


def _assignments(connection, model, values: dict, prefix: str = "") -> tuple[list, list]:
    """`column = %s` for each of `values` (prepared as `Model.save` would), and the params."""
    quote = connection.ops.quote_name
    sets, params = [], []
    for name, value in values.items():
        field = model._meta.get_field(name)
        sets.append(f"{prefix}{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    return sets, params


def update_by_pk(model, keys: list, values: dict, increment=()) -> None:
    """One plain UPDATE of `model` rows by primary key: `values` prepared as `Model.save`
    would, `increment` counters raised by one (a `write`)."""
    connection = database()
    quote = connection.ops.quote_name
    sets, params = _assignments(connection, model, values)
    sets += [f"{quote(name)} = {quote(name)} + 1" for name in increment]
    found = shape(model, connection=connection)
    write(connection, f"UPDATE {found.table} SET {', '.join(sets)} WHERE {found.pk_column} IN"
                      f" ({', '.join(['%s'] * len(keys))})", params + keys)


def update_rows(rows: list) -> None:
    """Rows of different tables, `(model, pk, values)` each, written by primary key in one
    UPDATE (MariaDB's multiple-table form: one round trip where there would be one per
    row); elsewhere one UPDATE a row. The caller holds their locks: the statement takes
    none it does not have, and its WHERE names primary keys only."""
    connection = database()
    if connection.vendor != "mysql":
        for model, pk, values in rows:
            update_by_pk(model, [pk], values)
        return
    tables, sets, params, keys = [], [], [], []
    for index, (model, pk, values) in enumerate(rows):
        found = shape(model, connection=connection)
        tables.append(f"{found.table} AS r{index}")
        row_sets, row_params = _assignments(connection, model, values, prefix=f"r{index}.")
        sets += row_sets
        params += row_params
        keys.append((f"r{index}.{found.pk_column} = %s", pk))
    write(connection, f"UPDATE {', '.join(tables)} SET {', '.join(sets)}"
                      f" WHERE {' AND '.join(condition for condition, _ in keys)}", params + [pk for _, pk in keys])


def matching(model, names: tuple, keys, connection=None) -> tuple[str, list]:
    """`(a = %s AND b = %s) OR …`, one group per key of `keys` (values of the attnames
    `names`), and its parameters: the WHERE clause that a Q of one lookup per key compiles
    to, without compiling it (a batch of twenty keys costs more to compile than to run)."""
    quote = (connection or database()).ops.quote_name
    group = "(" + " AND ".join(f"{quote(model._meta.get_field(name).column)} = %s" for name in names) + ")"
    keys = list(keys)
    return " OR ".join([group] * len(keys)), [value for key in keys for value in key]


def load_joined(first: RowShape, second: RowShape, sql: str, params, *, more: bool = False):
    """The first row of `sql` (`first`'s columns, then `second`'s) as a pair of instances,
    or None if it finds no row; with `more`, a triple whose last item is the row's further
    columns (a tuple)."""
    connection = database()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    instance, rest = first.split(row, connection)
    if more:
        return instance, *second.split(rest, connection)
    return instance, second.build(rest, connection)
