"""Model rows read with plain SQL: the hot paths' reads (locks, the submit's problem).

Compiling a queryset costs several times running its statement on this kind of path; a
`RowShape` is compiled once per model (and field subset) and builds instances with the
converters Django's compiler would apply (aware datetimes, JSON, booleans). Fields left
out are deferred, so touching one loads it rather than reading a wrong default.
"""

from django.db import connection


class RowShape:
    def __init__(self, model, names: tuple | None = None):
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

    def columns_of(self, alias: str) -> str:
        return ", ".join(f"{alias}.{name}" for name in self.column_names)

    def build(self, row):
        values = list(row)
        for index, column, converters in self.converters:
            for converter in converters:
                values[index] = converter(values[index], column, connection)
        return self.model.from_db(connection.alias, self.attnames, values)

    def load(self, sql: str, params) -> list:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return [self.build(row) for row in rows]


_shapes: dict[tuple, RowShape] = {}


def shape(model, names: tuple | None = None) -> RowShape:
    """The shape of `model`'s rows: every concrete field, or only the attnames `names`."""
    key = (model, names, connection.vendor)
    found = _shapes.get(key)
    if found is None:
        found = _shapes[key] = RowShape(model, names)
    return found
