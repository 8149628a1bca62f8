INSERT INTO departments (id, name) VALUES
    (1, 'Engineering'),
    (2, 'Sales'),
    (3, 'Support'),
    (4, 'Platform Engineering');

-- Traps: Chen was hired on the cut-off date itself, so gets no raise. The raise of Brian needs
-- rounding (4321.55 * 1.10 = 4753.705). Dana, Jia and Kai hit the 9000.00 cap. Eli is already
-- above it. Milo works in Platform Engineering, which is not the Engineering department.
INSERT INTO employees (id, name, department_id, hired_on, salary) VALUES
    (1, 'Ada', 1, '2018-03-01', 5000.00),
    (2, 'Brian', 1, '2019-12-31', 4321.55),
    (3, 'Chen', 1, '2020-01-01', 6000.00),
    (4, 'Dana', 1, '2017-06-15', 8500.00),
    (5, 'Eli', 1, '2016-01-10', 9500.00),
    (6, 'Fay', 1, '2021-09-01', 4000.00),
    (7, 'Gus', 2, '2015-05-05', 5000.00),
    (8, 'Hana', 2, '2019-02-02', 4500.00),
    (9, 'Ivo', 3, '2018-08-08', 3999.99),
    (10, 'Jia', 1, '2019-07-07', 8181.82),
    (11, 'Kai', 1, '2019-01-01', 8999.99),
    (12, 'Milo', 4, '2018-01-01', 5000.00);
