-- Expected verdict: AC. A different formulation from the reference (a subquery instead of a
-- multi-table UPDATE, CASE instead of LEAST) that leaves the table in the same state.
UPDATE employees
SET salary = CASE
    WHEN ROUND(salary * 1.10, 2) > 9000.00 THEN 9000.00
    ELSE ROUND(salary * 1.10, 2)
END
WHERE department_id IN (SELECT id FROM departments WHERE name = 'Engineering')
  AND hired_on < '2020-01-01'
  AND salary < 9000.00;
